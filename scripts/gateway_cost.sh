#!/usr/bin/env bash
# What one proxied search costs the proxy itself, counted rather than timed (a shared machine's
# noise moves latencies, hardly these counts): runs `sluice-bench gateway-overhead` at one
# client (steady, or in bursts with `burst` as the fourth argument) against `direct` and one
# proxy (`gateway`, sluice's gateway, or `nginx`), and while the proxy is measured, `perf stat`
# counts on the proxy's process(es) for 8 s its futex calls, epoll waits, context switches,
# `write` calls (a tokio runtime waking its own driver writes its eventfd; the proxies send with
# sendto and writev) and CPU time (split into user and kernel time, from `/proc`), and in the
# same window the CPU time and context switches of
# the upstream and of the bench's clients (what the proxy makes its neighbours do, charged to
# the latency on shared cores as much as its own work). Prints them per request (requests =
# writev and sendto calls / 2: one to the upstream, one to the client per proxied request;
# hyper and nginx write with writev, the gateway's fast lane with send).
#
# Usage: scripts/gateway_cost.sh gateway|nginx [sluice binary] [clients] [steady|burst]
#   e.g. scripts/gateway_cost.sh gateway target/release/sluice
#        scripts/gateway_cost.sh nginx "" 1 burst
# Needs perf (linux-perf), nginx for `nginx`, and the release sluice-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
via="${1:?gateway or nginx}"
bin="$(realpath "${2:-$target/release/sluice}")"
clients="${3:-1}"
load="${4:-steady}"
out="$(mktemp -d -t sluice-cost-XXXXXX)"
trap 'rm -rf "$out"' EXIT

nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
if [[ "$via" == nginx && ! -x "$nginx_bin" ]]; then
    echo "nginx is not installed: apt-get install nginx-light (scripts/gateway_bench.sh installs it)" >&2
    exit 1
fi

"$target/release/sluice-bench" gateway-overhead --sluice-bin "$bin" --via "direct,$via" \
    --clients "$clients" --loads "$load" --rounds 1 --duration-secs 14 --warmup-secs 1 \
    --docs 5000 --nginx-bin "$nginx_bin" > "$out/bench" 2>&1 &
bench=$!
# `direct` is measured first in the first round; the proxy's window starts once it is reported.
for _ in $(seq 1 600); do grep -q "direct " "$out/bench" 2>/dev/null && break; sleep 0.2; done
case "$via" in
    gateway) pids="$(pgrep -f "$bin serve.*backend.type=upstream" | paste -sd,)" ;;
    nginx) pids="$(pgrep -f 'nginx: worker' | paste -sd,)" ;;
    *) echo "via must be gateway or nginx" >&2; exit 2 ;;
esac
if [[ -z "$pids" ]]; then
    echo "no $via process found to count; the benchmark said:" >&2
    cat "$out/bench" >&2
    exit 1
fi
upstream="$(pgrep -f "$bin serve.*path.data=[^ ]*/upstream( |$)" | paste -sd,)"
client="$(pgrep -f "sluice-bench gateway-overhead" | paste -sd,)"
sleep 4 # past the proxy's warm-up second, inside its 14 s window
# The upstream's and the clients' CPU in the same window: on shared cores what a proxy makes
# the others do is charged to the latency as much as its own CPU.
for who in upstream client; do
    perf stat -x, -e 'context-switches,task-clock' -p "${!who}" -- sleep 8 2> "$out/$who" &
done
# The proxy's CPU split into user and kernel time (`/proc/<pid>/stat` fields 14 and 15, in
# clock ticks), read at the window's ends: perf's task-clock is their sum.
cpu_ticks() {
    for p in ${pids//,/ }; do awk '{print $14, $15}' "/proc/$p/stat"; done |
        awk '{u += $1; s += $2} END {print u, s}'
}
cpu_ticks > "$out/ticks"
perf stat -x, -e 'syscalls:sys_enter_futex,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,raw_syscalls:sys_enter,context-switches,task-clock' \
    -p "$pids" -- sleep 8 2> "$out/stat"
cpu_ticks >> "$out/ticks"
wait "$bench"
grep -E "^round .* ($via|direct) " "$out/bench"
awk -F, -v via="$via" -v hz="$(getconf CLK_TCK)" '
    FILENAME ~ /ticks$/ {split($0, v, " "); if (FNR == 1) {u0 = v[1]; s0 = v[2]} else {u1 = v[1]; s1 = v[2]}}
    FILENAME ~ /stat$/ && $3 ~ /futex/ {f=$1} FILENAME ~ /stat$/ && $3 ~ /enter_write$/ {ww=$1}
    FILENAME ~ /stat$/ && $3 ~ /writev/ {w=$1} FILENAME ~ /stat$/ && $3 ~ /sendto/ {s=$1}
    FILENAME ~ /stat$/ && $3 ~ /epoll/ {e=$1} FILENAME ~ /stat$/ && $3 ~ /raw_syscalls/ {a=$1}
    FILENAME ~ /stat$/ && $3 ~ /context-switches/ {c=$1} FILENAME ~ /stat$/ && $3 ~ /task-clock/ {t=$1}
    FILENAME ~ /upstream$/ && $3 ~ /context-switches/ {uc=$1} FILENAME ~ /upstream$/ && $3 ~ /task-clock/ {ut=$1}
    FILENAME ~ /client$/ && $3 ~ /context-switches/ {cc=$1} FILENAME ~ /client$/ && $3 ~ /task-clock/ {ct=$1}
    END { r = (w + s) / 2
          printf "%s: %d requests counted; per request: syscalls %.2f, futex %.2f, epoll_wait %.2f, context switches %.2f, write %.2f, CPU %.4f ms\n", via, r, a / r, f / r, e / r, c / r, ww / r, t / r
          printf "  of the CPU, per request: user %.4f ms, kernel %.4f ms\n", (u1 - u0) * 1000 / hz / r, (s1 - s0) * 1000 / hz / r
          printf "  in the same window, per request: upstream CPU %.4f ms, %.2f context switches; clients CPU %.4f ms, %.2f context switches\n", ut / r, uc / r, ct / r, cc / r }' "$out/stat" "$out/upstream" "$out/client" "$out/ticks"
