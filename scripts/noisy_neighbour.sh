#!/usr/bin/env bash
# The noisy-neighbour scenario of issue #6, end to end: builds the release binaries, starts a
# sluice node on a temporary data folder, loads generated log documents, creates the workload
# groups "analytics" (enforced, cpu 0.3; heavy aggregations from several clients) and
# "product" (soft, cpu 0.6; cheap term queries at a fixed rate), then measures product's
# latency alone, next to analytics with wlm.workload_group.mode disabled, with it enabled (usage
# measured once per enforcement run as OpenSearch does; every 100 ms; every 100 ms plus the
# estimate of unmeasured tasks, sluice's defaults), enabled with analytics also throttled
# (node_limit), and enabled with analytics throttled *and* queued (node_limit 1 and a queue,
# analytics enforced, then soft). Prints both tables as Markdown.
#
# Usage: scripts/noisy_neighbour.sh [sluice-bench noisy-neighbour options]
#   e.g. scripts/noisy_neighbour.sh --rounds 5 --analytics-clients 8
# See `sluice-bench noisy-neighbour --help` for every option. Takes about eight minutes after
# the build on two cores. The node's log is kept as <data>/server.log only with --keep-data.
set -euo pipefail

cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

keep=0
args=()
for a in "$@"; do
    if [[ "$a" == "--keep-data" ]]; then keep=1; else args+=("$a"); fi
done

echo "building release binaries (CARGO_TARGET_DIR=$target)…" >&2
# One at a time, as `scripts/gateway_bench.sh` builds them (the bench's tokio features stay
# out of sluice).
cargo build --release --quiet -p sluice-server
cargo build --release --quiet -p sluice-bench

data="$(mktemp -d -t sluice-noisy-XXXXXX)"
if [[ $keep -eq 1 ]]; then
    echo "data and server log kept in $data" >&2
else
    trap 'rm -rf "$data"' EXIT
fi

echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run" >&2
"$target/release/sluice-bench" noisy-neighbour --spawn --data-dir "$data" "${args[@]+"${args[@]}"}"
