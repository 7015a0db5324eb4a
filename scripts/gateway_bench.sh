#!/usr/bin/env bash
# The gateway-overhead benchmark of issue 13, end to end: installs nginx from Debian's packages
# when it is missing, builds the release binaries, then runs `sluice-bench gateway-overhead`:
# one upstream (an embedded sluice node with generated log documents) reached directly, through
# sluice's gateway (untagged, and tagged into a group throttled far above the load) and through
# nginx (proxy_pass with keep-alive and limit_conn), side by side in one run, at 1, 8 and 32
# clients, steady (closed loops) and in bursts (all clients at one instant). Prints the table
# as Markdown.
#
# Usage: scripts/gateway_bench.sh [sluice-bench gateway-overhead options]
#   e.g. scripts/gateway_bench.sh --rounds 5 --clients 1,8,32
# PGO=1 builds and measures the profile-guided release (scripts/pgo_build.sh, about 35 minutes
# more), the build a production gateway runs, as both the gateway and the upstream.
# PROXY_CPUS=1 runs the gateway and nginx on CPU 1 alone and the bench (clients and upstream)
# on the other CPUs, as a proxy on hosts of its own runs (`--proxy-cpus`).
# See `sluice-bench gateway-overhead --help` for every option.
set -euo pipefail

cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

if ! command -v nginx >/dev/null 2>&1 && [[ ! -x /usr/sbin/nginx ]]; then
    echo "installing nginx from Debian's packages…" >&2
    apt-get update -qq -o DPkg::Lock::Timeout=300 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends nginx-light >/dev/null \
        || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends nginx >/dev/null
fi

echo "building release binaries (CARGO_TARGET_DIR=$target)…" >&2
# One at a time: built together, sluice would get the bench's tokio features (`process`,
# whose driver works on every park), which `cargo run --release --bin sluice` does not.
if [[ -n "${PGO:-}" ]]; then
    scripts/pgo_build.sh "$target/pgo/sluice"
    set -- --sluice-bin "$target/pgo/sluice" "$@"
else
    cargo build --release --quiet -p sluice-server
fi
cargo build --release --quiet -p sluice-bench

echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run" >&2
pin=()
if [[ -n "${PROXY_CPUS:-}" ]]; then
    # The CPUs this script may use, less the proxy's (lists such as 1 or 0,2-3).
    others="$(python3 -c '
import os, sys
proxy = set()
for part in sys.argv[1].split(","):
    lo, _, hi = part.partition("-")
    proxy.update(range(int(lo), int(hi or lo) + 1))
rest = sorted(os.sched_getaffinity(0) - proxy)
if not rest:
    sys.exit("PROXY_CPUS leaves no CPU for the clients and the upstream")
print(",".join(map(str, rest)))
' "$PROXY_CPUS")"
    pin=(taskset -c "$others")
    set -- --proxy-cpus "$PROXY_CPUS" "$@"
    echo "proxies on CPUs $PROXY_CPUS; clients and upstream on $others" >&2
fi
"${pin[@]}" "$target/release/sluice-bench" gateway-overhead --nginx-bin "$(command -v nginx || echo /usr/sbin/nginx)" "$@"
