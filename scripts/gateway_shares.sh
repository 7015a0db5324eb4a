#!/usr/bin/env bash
# What each process of `sluice-bench gateway-overhead` takes of the machine, window by window:
# runs the benchmark (steady load by default; any `gateway-overhead` option may be added) while
# sampling /proc twice a second — the machine's busy, idle and stolen time (/proc/stat) and the
# CPU time of the proxy (the gateway, or nginx's workers), the upstream and the bench's
# clients (/proc/<pid>/stat) — and prints, for each way and round, the CPU each took a request
# and the proxy's share of all the CPU the machine spent, then the rounds paired: the gateway's
# share against nginx's in the same round.
#
# Why the share: at saturation (the two cores full) the latency of closed-loop clients is
# clients ÷ throughput, and the throughput is the machine's CPU ÷ the CPU a request takes of
# every process, so a proxy adds latency there in proportion to its share. How fast the
# machine runs moves from window to window on a shared host (the upstream's CPU a search by
# ±15 %, and every latency with it); a proxy's share of the same window does not move with it.
#
# Usage: scripts/gateway_shares.sh [sluice binary] [gateway-overhead options]
#   e.g. scripts/gateway_shares.sh target/release/sluice --clients 32 --rounds 8
# Needs the release sluice-bench and nginx (scripts/gateway_bench.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
bin="$(realpath "${1:-$target/release/sluice}")"
shift || true
out="$(mktemp -d -t sluice-shares-XXXXXX)"
sampler=""
trap '[[ -n "$sampler" ]] && kill "$sampler" 2>/dev/null; rm -rf "$out"' EXIT
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

# The sampler: a line every half second, `time cpu-fields… gateway nginx upstream bench` (the
# last four in clock ticks, threads included).
python3 - "$out/samples" <<'EOF' &
import os, sys, time
out = open(sys.argv[1], "w")
roles = ["gateway", "nginx", "upstream", "bench"]
def role(cmd):
    if "backend.type=upstream" in cmd: return "gateway"
    if cmd.startswith("nginx: worker"): return "nginx"
    if " serve " in cmd and "/upstream" in cmd: return "upstream"
    if "sluice-bench" in cmd and "gateway-overhead" in cmd: return "bench"
    return None
while True:
    t = time.time()
    cpu = open("/proc/stat").readline().split()[1:9]
    ticks = dict.fromkeys(roles, 0)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            r = role(cmd)
            if r:
                st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                ticks[r] += int(st[11]) + int(st[12])
        except OSError:
            pass
    print(f"{t:.3f}", *cpu, *(ticks[r] for r in roles), file=out, flush=True)
    time.sleep(0.5 - (time.time() - t) % 0.5)
EOF
sampler=$!

duration=4
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    [[ "${args[i]}" == --duration-secs ]] && duration="${args[i + 1]}"
done
# Each line of the benchmark stamped with the time it came: a round's line ends its window.
"$target/release/sluice-bench" gateway-overhead --sluice-bin "$bin" --nginx-bin "$nginx_bin" \
    --via direct,gateway,nginx --loads steady --duration-secs "$duration" "$@" 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$out/bench"
kill "$sampler"

python3 - "$out/bench" "$out/samples" "$duration" "$(getconf CLK_TCK)" <<'EOF'
import re, sys, statistics
bench, samples, duration, hz = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
mon = [list(map(float, l.split())) for l in open(samples) if l.strip()]
tick_us = 1e6 / hz
rows = {}
print("| round | load | clients | via | QPS | p50 ms | machine idle | stolen | proxy µs a request | upstream µs | clients µs | all µs | proxy share |")
print("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for line in open(bench):
    m = re.match(r"(\S+) round (\d+)/\d+ (\S+)\s+c=(\d+)\s+(\S+)\s+(\d+) qps\s+p50\s+(\S+)", line)
    if not m:
        continue
    end = float(m.group(1))
    first = [s for s in mon if s[0] >= end - duration - 0.05]
    last = [s for s in mon if s[0] <= end]
    if not first or not last or last[-1][0] - first[0][0] < duration * 0.6:
        continue
    d = [b - a for a, b in zip(first[0], last[-1])]
    cpu = d[1:9]
    total = sum(cpu)
    idle = cpu[3] + cpu[4]
    qps = float(m.group(6))
    requests = qps * d[0]
    gateway, nginx, upstream, clients = d[9:13]
    proxy = gateway + nginx
    busy = total - idle
    r = dict(round=int(m.group(2)), load=m.group(3), clients=int(m.group(4)), via=m.group(5),
             share=proxy / busy if busy else 0.0)
    rows.setdefault((r["load"], r["clients"], r["via"]), {})[r["round"]] = r
    print(f"| {r['round']} | {r['load']} | {r['clients']} | {r['via']} | {qps:.0f} | {m.group(7)} | "
          f"{idle / total:.1%} | {cpu[7] / total:.1%} | {proxy * tick_us / requests:.1f} | "
          f"{upstream * tick_us / requests:.1f} | {clients * tick_us / requests:.1f} | "
          f"{busy * tick_us / requests:.1f} | {r['share']:.2%} |")
print()
print("| load | clients | rounds | gateway share (median) | nginx share (median) | gateway / nginx (median of rounds) | gateway higher / lower |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (load, clients, via), by_round in sorted(rows.items()):
    if via != "gateway":
        continue
    other = rows.get((load, clients, "nginx"), {})
    paired = [(by_round[k]["share"], other[k]["share"]) for k in by_round if k in other]
    if not paired:
        continue
    ratios = [g / n for g, n in paired if n]
    higher = sum(g > n for g, n in paired)
    print(f"| {load} | {clients} | {len(paired)} | {statistics.median(g for g, _ in paired):.2%} | "
          f"{statistics.median(n for _, n in paired):.2%} | {statistics.median(ratios):.3f} | "
          f"{higher} / {len(paired) - higher} |")
EOF
