#!/usr/bin/env bash
# A three-node sluice cluster on this machine: a throwaway PostgreSQL metastore
# (scripts/postgres.sh) and three nodes on 127.0.0.1 — HTTP 9200, 9201, 9202; transport
# 9300, 9301, 9302 — each with its own data folder under data/cluster/. Ctrl-C stops the
# nodes and deletes the PostgreSQL server (the nodes' data folders stay).
#
# Usage: scripts/cluster.sh [extra -E settings for every node, e.g. -E auth.type=none]
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=3
# CLUSTER_BIN runs another build (a debug binary, say) instead of building the release one.
if [[ -n "${CLUSTER_BIN:-}" ]]; then
    BIN="$CLUSTER_BIN"
else
    cargo build --release --bin sluice >&2
    BIN=target/release/sluice
fi

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

METASTORE="$SLUICE_TEST_POSTGRES_URL"
# The nodes read SLUICE_* variables as settings: these two are the script's own.
unset SLUICE_TEST_POSTGRES_URL SLUICE_TEST_POSTGRES_DIR
SEEDS="127.0.0.1:9300,127.0.0.1:9301,127.0.0.1:9302"
for i in $(seq 1 "$NODES"); do
    mkdir -p "data/cluster/n$i"
    "$BIN" serve \
        -E "node.name=n$i" -E cluster.name=sluice-local \
        -E "http.port=$((9199 + i))" -E "transport.port=$((9299 + i))" \
        -E "path.data=data/cluster/n$i" -E "metastore.uri=$METASTORE" \
        -E "discovery.seed_hosts=$SEEDS" "$@" \
        2>"data/cluster/n$i.log" &
    PIDS+=("$!")
done

# Wait (up to a minute) until every node lists all three members.
for i in $(seq 1 "$NODES"); do
    port=$((9199 + i))
    for _ in $(seq 1 600); do
        n="$(curl -s "http://127.0.0.1:$port/_cat/nodes?h=name" 2>/dev/null | grep -c . || true)"
        [[ "$n" == "$NODES" ]] && break
        if ! kill -0 "${PIDS[$((i - 1))]}" 2>/dev/null; then
            echo "cluster.sh: node n$i exited; its log:" >&2
            cat "data/cluster/n$i.log" >&2
            exit 1
        fi
        sleep 0.1
    done
done
curl -s "http://127.0.0.1:9200/_cat/nodes?v&h=name,http_address,ip,port,cluster_manager"
cat <<MSG
Three nodes are up (logs in data/cluster/n1.log … n3.log). Try:
  curl -s 'localhost:9200/_cluster/health?pretty'
  curl -s 'localhost:9201/_wlm/stats?pretty'
Ctrl-C stops them.
MSG
wait
