#!/usr/bin/env bash
# Runs opensearch-benchmark (PyPI `opensearch-benchmark`, unmodified) against a sluice node
# with the http_logs-shaped workload in benchmarks/osb/http_logs_like: builds the release
# binary, starts `sluice serve` on a temporary data folder and port, copies the workload next
# to a corpus written by `sluice gen-logs`, and runs OSB's `benchmark-only` pipeline against the
# node (no shim: OSB talks to sluice's HTTP API as to an OpenSearch cluster). Prints OSB's
# summary table (also kept as results.md with --keep-data) and any warning or error in the
# node's log, so that a task failing inside the node (OSB reads only a background task's
# `completed`) does not go unnoticed; the node's log stays in the temporary folder with
# --keep-data. OSB's own log is ~/.osb/logs/benchmark.log (~/.benchmark on older versions).
#
# Usage: scripts/osb.sh [--docs N] [--keep-data] [extra opensearch-benchmark options]
#   e.g. scripts/osb.sh --docs 1000000 --workload-params="iterations:100"
# Needs `opensearch-benchmark` on PATH (`pip install opensearch-benchmark`, or set OSB to its
# path). OSB runs offline: the workload and the corpus are local. Run end to end with
# opensearch-benchmark 2.4.0 on Python 3.11: every task, error rate 0, always-on telemetry
# without failures (BENCHMARKS.md, "opensearch-benchmark (issue 17 point 9)").
set -euo pipefail

cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
osb="${OSB:-opensearch-benchmark}"

docs=1000000
keep=0
args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --docs) docs="$2"; shift 2 ;;
        --keep-data) keep=1; shift ;;
        *) args+=("$1"); shift ;;
    esac
done

echo "building the release binary (CARGO_TARGET_DIR=$target)…" >&2
cargo build --release --quiet -p sluice-server

work="$(mktemp -d -t sluice-osb-XXXXXX)"
cleanup() {
    if [[ -n "${node_pid:-}" ]]; then kill "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
    if [[ "$keep" == 0 ]]; then rm -rf "$work"; else echo "kept $work" >&2; fi
}
trap cleanup EXIT

# The workload and its corpus, in one folder as OSB expects a local workload's data.
cp -r benchmarks/osb/http_logs_like "$work/workload"
echo "writing $docs documents with sluice gen-logs…" >&2
"$target/release/sluice" gen-logs --docs "$docs" --seed 42 --index logs-gen \
    > "$work/workload/documents.json"

port="${PORT:-9277}"
"$target/release/sluice" serve -E "path.data=$work/data" -E "http.port=$port" \
    > "$work/server.log" 2>&1 &
node_pid=$!
for _ in $(seq 1 600); do
    if curl -fsS "http://127.0.0.1:$port/" > /dev/null 2>&1; then break; fi
    sleep 0.1
done

"$osb" run --pipeline=benchmark-only --offline --on-error=abort \
    --target-hosts="127.0.0.1:$port" \
    --workload-path="$work/workload" \
    --workload-params="docs:$docs" \
    --kill-running-processes \
    --results-file="$work/results.md" \
    "${args[@]}"

cat "$work/results.md"
if grep -E "^\S+ +(WARN|ERROR) " "$work/server.log" >&2; then
    echo "the node logged the warnings or errors above during the run" >&2
fi
