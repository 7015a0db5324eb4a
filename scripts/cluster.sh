#!/usr/bin/env bash
# A three-node sluice cluster on this machine: a throwaway PostgreSQL metastore
# (scripts/postgres.sh) and three nodes on 127.0.0.1 — HTTP 9200, 9201, 9202; transport
# 9300, 9301, 9302 — each with its own data folder under data/cluster/ (git ignores data/).
# Ctrl-C stops the nodes and deletes the PostgreSQL server (the nodes' data folders stay).
#
# Usage: scripts/cluster.sh [extra -E settings for every node, e.g. -E auth.type=none]
#
# Environment (each optional; a relative path is taken from the folder you run it in):
#   CLUSTER_BIN             a sluice binary to run (a debug build, say); unset: the script
#                           builds the release binary with cargo first
#   CLUSTER_HTTP_PORT       the first node's HTTP port (default 9200); the others take the next
#   CLUSTER_TRANSPORT_PORT  the first node's transport port (default 9300); likewise
#   CLUSTER_DATA            the folder of the nodes' data and logs (default data/cluster in the
#                           repository)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
absolute() { realpath -m -- "$1"; }

NODES=3
HTTP_PORT="${CLUSTER_HTTP_PORT:-9200}"
TRANSPORT_PORT="${CLUSTER_TRANSPORT_PORT:-9300}"
DATA="$(absolute "${CLUSTER_DATA:-$ROOT/data/cluster}")"
if [[ -n "${CLUSTER_BIN:-}" ]]; then
    BIN="$(absolute "$CLUSTER_BIN")"
else
    (cd "$ROOT" && cargo build --release --bin sluice >&2)
    # cargo puts it under CARGO_TARGET_DIR when that is set (relative: to the repository).
    BIN="$(cd "$ROOT" && absolute "${CARGO_TARGET_DIR:-target}/release/sluice")"
fi
cd "$ROOT"

eval "$(scripts/postgres.sh start)"
PG_DIR="$SLUICE_TEST_POSTGRES_DIR"
PIDS=()
cleanup() {
    trap - EXIT INT TERM
    echo "cluster.sh: stopping the nodes" >&2
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    scripts/postgres.sh stop "$PG_DIR"
}
trap cleanup EXIT INT TERM

# The metastore URI holds the database password: the nodes read it from the environment
# (SLUICE_METASTORE_URI, the setting metastore.uri), which other users cannot read, rather
# than from a -E flag, which `ps` shows to everyone.
METASTORE="$SLUICE_TEST_POSTGRES_URL"
# The nodes read SLUICE_* variables as settings: these two are the script's own.
unset SLUICE_TEST_POSTGRES_URL SLUICE_TEST_POSTGRES_DIR
SEEDS=""
for i in $(seq 0 $((NODES - 1))); do
    SEEDS="${SEEDS:+$SEEDS,}127.0.0.1:$((TRANSPORT_PORT + i))"
done
for i in $(seq 1 "$NODES"); do
    mkdir -p "$DATA/n$i"
    SLUICE_METASTORE_URI="$METASTORE" "$BIN" serve \
        -E "node.name=n$i" -E cluster.name=sluice-local \
        -E "http.port=$((HTTP_PORT + i - 1))" -E "transport.port=$((TRANSPORT_PORT + i - 1))" \
        -E "path.data=$DATA/n$i" \
        -E "discovery.seed_hosts=$SEEDS" "$@" \
        2>"$DATA/n$i.log" &
    PIDS+=("$!")
done

# Wait (up to a minute) until every node lists all three members.
for i in $(seq 1 "$NODES"); do
    port=$((HTTP_PORT + i - 1))
    for _ in $(seq 1 600); do
        n="$(curl -s "http://127.0.0.1:$port/_cat/nodes?h=name" 2>/dev/null | grep -c . || true)"
        [[ "$n" == "$NODES" ]] && break
        if ! kill -0 "${PIDS[$((i - 1))]}" 2>/dev/null; then
            echo "cluster.sh: node n$i exited; its log:" >&2
            cat "$DATA/n$i.log" >&2
            exit 1
        fi
        sleep 0.1
    done
done
curl -s "http://127.0.0.1:$HTTP_PORT/_cat/nodes?v&h=name,http_address,ip,port,cluster_manager"
cat <<MSG
Three nodes are up on HTTP $HTTP_PORT-$((HTTP_PORT + NODES - 1)) (logs in $DATA/n1.log … n$NODES.log). Try:
  curl -s 'localhost:$HTTP_PORT/_cluster/health?pretty'
  curl -s 'localhost:$((HTTP_PORT + 1))/_wlm/stats?pretty'
Ctrl-C stops them.
MSG
wait
