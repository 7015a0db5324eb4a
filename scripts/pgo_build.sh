#!/usr/bin/env bash
# Builds a profile-guided release of `sluice` (PGO): an instrumented release build first, then a
# training run of it — an embedded node as the upstream and a gateway in front of it, workload
# management on, driven by `sluice-bench` (a bulk load, every query shape at 1, 8 and 32
# clients, then searches tagged into throttled groups) — then the release built again with the
# profile that run wrote. LLVM lays the code out by it: the hot paths together, the cold ones
# apart, which takes a gateway's searches fewer instruction-cache misses (BENCHMARKS.md
# "A profile-guided build").
#
# Usage: scripts/pgo_build.sh [output binary]   (default: target/pgo/sluice)
# Needs rustup's llvm-tools component (llvm-profdata of the toolchain's own LLVM); the
# script adds it when it is missing. The two builds use target directories of their own
# (under CARGO_TARGET_DIR or target/): RUSTFLAGS differ from a plain build's.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
output="${1:-$target/pgo/sluice}"
work="$(realpath -m "$target/pgo")"
mkdir -p "$work"
raw="$work/raw"

sysroot="$(rustc --print sysroot)"
host="$(rustc -vV | awk '/^host:/ {print $2}')"
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    rustup component add llvm-tools
fi

echo "== instrumented build, and the bench" >&2
# Each built alone: built together, sluice would get the bench's tokio features (`process`),
# and its profile would be of code the release build does not have.
CARGO_TARGET_DIR="$work/gen" RUSTFLAGS="-Cprofile-generate=$raw" \
    cargo build --release -p sluice-server --bin sluice
cargo build --release --quiet -p sluice-bench
gen="$work/gen/release"
bench="$target/release/sluice-bench"
# Only the training's profile: the instrumented build scripts and macros wrote theirs here too.
rm -rf "$raw"
mkdir -p "$raw"

echo "== training run" >&2
out="$(mktemp -d -t sluice-pgo-XXXXXX)"
# shellcheck source=scripts/proxy_fixture.sh
. scripts/proxy_fixture.sh
start_upstream "$gen/sluice"
gateway_port="$(free_port)"
"$gen/sluice" serve -E "http.port=$gateway_port" -E transport.port=0 \
    -E "path.data=$out/gateway" -E node.name=gateway -E backend.type=upstream \
    -E "backend.upstream.hosts=http://127.0.0.1:$up_port" > "$out/gateway.log" 2>&1 &
pids+=($!)
wait_http "$gateway_port"
curl -sf -X PUT "http://127.0.0.1:$gateway_port/_cluster/settings" \
    -H 'content-type: application/json' \
    -d '{"persistent": {"wlm.workload_group.mode": "enabled"}}' > /dev/null
url="http://127.0.0.1:$gateway_port"
"$bench" --url "$url" --no-in-process \
    --docs 20000 --concurrency 1,8,32 --duration-secs 2 --warmup-secs 1 > "$out/foundation.txt"
"$bench" --scenario throttle-overhead \
    --url "$url" --no-in-process --docs 20000 --skip-load --rounds 1 --duration-secs 2 \
    --warmup-secs 1 > "$out/throttle.txt"
# A clean stop: the profile is written as the process exits.
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p" || true; done
pids=()
if ! compgen -G "$raw/*.profraw" > /dev/null; then
    echo "the training run wrote no profile under $raw: did the nodes exit cleanly?" >&2
    exit 1
fi

echo "== merge" >&2
"$profdata" merge -o "$work/merged.profdata" "$raw"

echo "== profile-guided build" >&2
CARGO_TARGET_DIR="$work/use" \
    RUSTFLAGS="-Cprofile-use=$work/merged.profdata" \
    cargo build --release -p sluice-server --bin sluice
mkdir -p "$(dirname "$output")"
cp "$work/use/release/sluice" "$output"
echo "$output" >&2
