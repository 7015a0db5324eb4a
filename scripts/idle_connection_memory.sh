#!/usr/bin/env bash
# What an idle keep-alive client connection costs the proxy in memory: the proxy's resident
# set (VmRSS) before and after N clients each sent one request and keep their connection open,
# divided by N. Memory, unlike time, does not depend on what else the machine is doing.
#
# Starts an embedded upstream (release `sluice`) with a few documents on a free port, then the
# proxy in front of it (`gateway`: `sluice serve -E backend.type=upstream`; `nginx`: one nginx
# process, proxy_pass with upstream keep-alive, as `sluice-bench gateway-overhead` configures
# it; `node`: no proxy, the embedded node itself is measured), opens a few warm-up connections,
# reads the measured process's VmRSS, opens N connections that each send one request and read
# its answer, reads VmRSS again, and prints the growth per connection.
#
# Usage: scripts/idle_connection_memory.sh gateway|nginx|node [sluice binary] [connections]
#   e.g. scripts/idle_connection_memory.sh gateway target/release/sluice 2000
# REQUEST_PATH (default /logs/_count, a request the gateway's fast lane serves) is what each
# connection sends, e.g. REQUEST_PATH=/_cluster/health for the general path.
# BODY_BYTES=<n> sends each a `POST` with a search body of about n bytes (a `match_all` padded
# with a query name) instead: what a connection keeps once a large request has passed.
# Needs python3, and nginx for `nginx`; the shell's open-file limit must exceed N.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
via="${1:?gateway, nginx or node}"
bin="$(realpath "${2:-$target/release/sluice}")"
connections="${3:-2000}"
out="$(mktemp -d -t sluice-idle-XXXXXX)"
# shellcheck source=scripts/proxy_fixture.sh
. scripts/proxy_fixture.sh

start_upstream "$bin"
curl -sf -X POST "http://127.0.0.1:$up_port/logs/_doc?refresh=true" \
    -H 'content-type: application/json' -d '{"msg": "hello"}' >/dev/null

proxy_port="$(free_port)"
case "$via" in
    gateway)
        "$bin" serve -E "http.port=$proxy_port" -E transport.port=0 -E "path.data=$out/gateway" \
            -E node.name=gateway -E backend.type=upstream \
            -E "backend.upstream.hosts=http://127.0.0.1:$up_port" > "$out/proxy.log" 2>&1 &
        ;;
    nginx)
        nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
        d="$out/nginx"
        nginx_conf "$d" "$proxy_port" "$up_port"
        "$nginx_bin" -c "$d/nginx.conf" -g "daemon off;" > "$out/proxy.log" 2>&1 &
        ;;
    node) ;;
    *) echo "via must be gateway, nginx or node" >&2; exit 2 ;;
esac
if [ "$via" = node ]; then
    proxy="${pids[0]}"
    proxy_port="$up_port"
else
    proxy=$!
    pids+=($proxy)
    wait_http "$proxy_port"
fi

python3 - "$proxy_port" "$connections" "$proxy" "$via" "${REQUEST_PATH:-/logs/_count}" "${BODY_BYTES:-0}" <<'EOF'
import json, socket, sys, time
port, n, pid, via, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
body_bytes = int(sys.argv[6])
if body_bytes:
    body = json.dumps({"query": {"match_all": {"_name": "a" * max(body_bytes - 40, 0)}}}).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    path = f"{path} with a {len(body)}-byte body"
else:
    request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n").encode()

def rss_kb():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

def one():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(request)
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, body = got.split(b"\r\n\r\n", 1)
    status = int(head.split()[1])
    assert status == 200, head
    length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n")
                  if l.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(65536)
    return s

warm = [one() for _ in range(8)]
time.sleep(0.5)
before = rss_kb()
held = [one() for _ in range(n)]
time.sleep(1.0)
after = rss_kb()
print(f"{via}: {n} idle connections ({path}): VmRSS {before} KB -> {after} KB, "
      f"{(after - before) / n:.1f} KB a connection")
for s in held + warm:
    s.close()
EOF
