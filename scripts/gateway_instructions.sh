#!/usr/bin/env bash
# What one proxied search costs the proxy in instructions, under valgrind's callgrind: the same
# count for the same binary and requests whatever else the machine is doing, so two builds (or
# sluice's gateway and nginx) compare exactly on a busy machine, where times do not.
#
# Starts an embedded upstream (release `sluice`) with 2,000 small documents on a free port,
# then the proxy under callgrind in front of it (`gateway`: `sluice serve -E
# backend.type=upstream`; `nginx`: one nginx process, proxy_pass with upstream keep-alive, as
# `sluice-bench gateway-overhead` configures it), sends 200 warm-up `term` searches on one
# keep-alive connection (or DRIVE_CLIENTS), zeroes the counters, sends N more and prints the
# proxy's instructions per request. Background work of the proxy during the window is
# included; for the gateway the share of its connections' tasks on the lane threads is printed
# too (without the 1 s usage refresh, a few percent that varies with the run's wall time):
# compare builds by that one.
#
# Usage: scripts/gateway_instructions.sh gateway|nginx [sluice binary] [requests]
#   e.g. scripts/gateway_instructions.sh gateway target/release/sluice 1000
# DRIVE_HEADERS (a JSON object) adds headers to the measured searches, e.g.
# DRIVE_HEADERS='{"x-opaque-id": "job-1"}'.
# GATEWAY_FLAGS adds settings to the gateway's command line, e.g.
# GATEWAY_FLAGS="-E backend.upstream.fast_lane=false" to count the general path.
# WLM=enabled turns workload management on in the gateway (`wlm.workload_group.mode`, as
# `sluice-bench gateway-overhead` runs it); TAGGED=1 also creates a group throttled far above
# the load (`node_limit` 100000) and tags every search into it, as the bench's `gateway-group`:
# compare `WLM=enabled` with `TAGGED=1` for what a tagged search costs.
# DRIVE_CLIENTS=<n> sends the searches on n keep-alive connections at once (default 1), so the
# count includes what concurrent requests do (a live bucket shared, queues looked at), e.g.
# DRIVE_CLIENTS=32 for the bench's 32 clients; the counts are still per request.
# With KEEP_PROFILE=<file> the callgrind profile of the measured requests is copied there, for
# `callgrind_annotate --inclusive=yes <file>`.
# CACHE_SIM=1 has callgrind simulate the caches too (its first-level caches: 32 KB of
# instructions, 32 KB of data) and prints the misses a request, of the proxy and of the
# gateway's connections' tasks: what the request's code and data footprint costs, which a
# count of instructions does not show (a miss costs several instructions' time).
# DUMP_INSTR=1 has the profile (KEEP_PROFILE) count each machine instruction rather than each
# source line: which instruction misses, and the sizes passed to `memcpy` at the call sites
# that run (the disassembly with `objdump -d`, their places with `addr2line -i`).
# COPIES=1 (gateway only) runs the gateway natively instead and counts with `perf` uprobes,
# a request, its allocations (jemalloc's entry points) and the calls to and bytes copied by
# libc's `memmove`/`memcpy` (moves of futures and buffers).
# Needs valgrind (or perf, with COPIES=1), python3, and nginx for `nginx`.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
via="${1:?gateway or nginx}"
bin="$(realpath "${2:-$target/release/sluice}")"
requests="${3:-1000}"
out="$(mktemp -d -t sluice-instr-XXXXXX)"
# shellcheck source=scripts/proxy_fixture.sh
. scripts/proxy_fixture.sh

start_upstream "$bin"
python3 - "$up_port" <<'EOF'
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
def call(method, path, body, ctype="application/json"):
    req = urllib.request.Request(base + path, data=body.encode(), method=method,
                                 headers={"content-type": ctype})
    return json.loads(urllib.request.urlopen(req).read())
call("PUT", "/logs", json.dumps({"mappings": {"properties": {
    "msg": {"type": "text"}, "status": {"type": "integer"}}}}))
lines = []
for i in range(2000):
    lines.append(json.dumps({"index": {}}))
    lines.append(json.dumps({"msg": f"hello world {i % 50}", "status": 200 + i % 5}))
r = call("POST", "/logs/_bulk?refresh=true", "\n".join(lines) + "\n", "application/x-ndjson")
assert not r["errors"], r
EOF

proxy_port="$(free_port)"
measure=(valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p")
[ -n "${CACHE_SIM:-}" ] && measure+=(--cache-sim=yes)
[ -n "${DUMP_INSTR:-}" ] && measure+=(--dump-instr=yes)
if [ -n "${COPIES:-}" ]; then
    [ "$via" = gateway ] || { echo "COPIES=1 counts the gateway only" >&2; exit 2; }
    measure=()
fi
case "$via" in
    gateway)
        "${measure[@]}" "$bin" serve \
            -E "http.port=$proxy_port" -E transport.port=0 -E "path.data=$out/gateway" \
            -E node.name=gateway -E backend.type=upstream \
            -E "backend.upstream.hosts=http://127.0.0.1:$up_port" ${GATEWAY_FLAGS:-} \
            > "$out/proxy.log" 2>&1 &
        ;;
    nginx)
        nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
        d="$out/nginx"
        nginx_conf "$d" "$proxy_port" "$up_port"
        "${measure[@]}" "$nginx_bin" -c "$d/nginx.conf" \
            -g "daemon off;" > "$out/proxy.log" 2>&1 &
        ;;
    *) echo "via must be gateway or nginx" >&2; exit 2 ;;
esac
proxy=$!
pids+=($proxy)
wait_http "$proxy_port"

if [ "$via" = gateway ] && { [ -n "${WLM:-}" ] || [ -n "${TAGGED:-}" ]; }; then
    group="$(python3 - "$proxy_port" "${TAGGED:-}" <<'EOF'
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
def call(method, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method=method,
                                 headers={"content-type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())
call("PUT", "/_cluster/settings", {"persistent": {"wlm.workload_group.mode": "enabled"}})
if sys.argv[2]:
    g = call("PUT", "/_wlm/workload_group", {
        "name": "tagged", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.5},
        "throttling": {"attribute": "group", "node_limit": 100000}})
    print(g["_id"])
EOF
)"
    if [ -n "${TAGGED:-}" ]; then
        export DRIVE_HEADERS="{\"workloadGroupId\": \"$group\"}"
    fi
fi

drive() {
    python3 - "$proxy_port" "$1" <<'EOF'
import http.client, json, os, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
clients = int(os.environ.get("DRIVE_CLIENTS") or "1")
body = json.dumps({"query": {"term": {"status": 201}}, "size": 10})
headers = {"content-type": "application/json"}
headers.update(json.loads(os.environ.get("DRIVE_HEADERS") or "{}"))
def run(count):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(count):
        c.request("POST", "/logs/_search", body=body, headers=headers)
        r = c.getresponse()
        d = r.read()
        assert r.status == 200, (r.status, d)
threads = [threading.Thread(target=run, args=(n // clients + (i < n % clients),))
           for i in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
EOF
}
drive 200
if [ -n "${COPIES:-}" ]; then
    # Probes named after this run, removed on the way out.
    group="sluice_copies_$$"
    libc="$(ldd "$bin" | awk '/libc\.so/ {print $3}')"
    trap 'perf probe -q -d "$group:*" 2>/dev/null; cleanup' EXIT
    for f in malloc mallocx calloc realloc rallocx; do
        perf probe -q -x "$bin" -a "$group:$f=_rjem_$f" 2>/dev/null || true
    done
    # The variant libc picked for this CPU is one of these (each `memcpy` variant is its
    # `memmove`'s other name, the same code); each probe reads the length.
    for f in $(perf probe -x "$libc" -F '__memmove_*_unaligned*' 2>/dev/null | grep -v _chk_); do
        perf probe -q -x "$libc" -a "$group:${f//[^a-z0-9]/_}=$f len=%dx:u64" 2>/dev/null || true
    done
    perf record -q -e "$group:*" -p "$proxy" -o "$out/copies.data" >/dev/null 2>&1 &
    recorder=$!
    # perf attaches within a moment: the requests are sent once it has (background work of
    # the gateway during the window is counted too, a few allocations a second).
    sleep 1
    drive "$requests"
    kill -INT "$recorder"
    wait "$recorder" || true
    perf script -i "$out/copies.data" -F event,trace 2>/dev/null | python3 -c '
import re, sys
requests = int(sys.argv[1])
allocs = calls = copied = 0
for line in sys.stdin:
    if ":__mem" in line:
        calls += 1
        m = re.search(r"len=(\d+)", line)
        copied += int(m.group(1)) if m else 0
    elif line.strip():
        allocs += 1
print(f"gateway: {requests} requests; a request: {allocs / requests:.1f} allocations, "
      f"{calls / requests:.1f} memmove/memcpy calls copying {copied / requests:,.0f} bytes")
' "$requests"
    exit 0
fi
callgrind_control -z "$proxy" >/dev/null 2>&1
drive "$requests"
callgrind_control -d "$proxy" >/dev/null 2>&1
dump="$(ls "$out"/cg."$proxy".* | grep -v "cg.$proxy\$" | head -1)"
[ -n "${KEEP_PROFILE:-}" ] && cp "$dump" "$KEEP_PROFILE"
total="$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
# The gateway's connections' tasks on its lane threads (`http/threads.rs` spawns them): the
# work of the requests themselves, without the background refresh or tokio's parking, whose
# share grows with the run's wall time on a busy machine: the poll of the box `http/threads.rs`
# spawns each in (builds before it spawned them in `Repoll`: that one's poll).
annotated="$out/inclusive"
callgrind_annotate --inclusive=yes "$dump" > "$annotated" 2>/dev/null || true
lane_task="http/threads.rs:<core::pin::Pin<P> as core::future::future::Future>::poll"
if grep -qF "http/threads.rs:<sluice_core::repoll::Repoll" "$annotated"; then
    lane_task="http/threads.rs:<sluice_core::repoll::Repoll<F> as core::future::future::Future>::poll"
elif ! grep -qF "$lane_task" "$annotated"; then
    # A profile-guided build (scripts/pgo_build.sh) inlines that poll into tokio's: the task's
    # own poll, a few instructions of tokio's task harness more.
    lane_task="http/threads.rs:tokio::runtime::task::raw::poll"
fi
lane="$(awk -v task="$lane_task" 'index($0, task) && !seen {gsub(",", "", $1); print $1; seen = 1}' "$annotated")"
if [ -n "${CACHE_SIM:-}" ]; then
    # Misses a request: the first-level instruction cache's, the data cache's (reads and
    # writes), of the whole proxy and (gateway) of its connections' tasks.
    callgrind_annotate --inclusive=yes --show=I1mr,D1mr,D1mw "$dump" 2>/dev/null | python3 -c '
import re, sys
n = int(sys.argv[1])
def per(line):
    # The three counts, their percentages taken out (a zero count has none, and may be ".").
    v = [int(x.replace(",", "").replace(".", "0"))
         for x in re.sub(r"\([^)]*\)", "", line).split()[:3]]
    return f"I1 {v[0] // n:,}, D1 {(v[1] + v[2]) // n:,} ({v[1] // n:,} reads, {v[2] // n:,} writes)"
lane = None
for line in sys.stdin:
    if "PROGRAM TOTALS" in line:
        print("cache misses a request:", per(line))
    elif lane is None and sys.argv[2] in line:
        lane = line
if lane:
    print("  of them in the connections tasks on the lane threads:", per(lane))
' "$requests" "$lane_task"
fi
if [ -n "$lane" ]; then
    echo "$via: $requests requests; $((total / requests)) instructions per request" \
        "($((lane / requests)) in the connections' tasks on the lane threads)"
else
    echo "$via: $requests requests; $((total / requests)) instructions per request"
fi
