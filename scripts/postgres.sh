#!/usr/bin/env bash
# A throwaway PostgreSQL for tests: a fresh cluster in a temporary folder, on a free loopback
# port, with password authentication, stopped and deleted on `stop`.
#
# Usage:
#   eval "$(scripts/postgres.sh start)"   # exports SLUICE_TEST_POSTGRES_URL and _DIR
#   scripts/postgres.sh stop "$SLUICE_TEST_POSTGRES_DIR"
#   scripts/postgres.sh down DIR          # stops the server, keeps its data (an outage)
#   scripts/postgres.sh up DIR            # starts it again on the same port
#
# `start` prints two `export` lines on stdout (everything else goes to stderr):
#   SLUICE_TEST_POSTGRES_URL  postgres://sluice:<password>@127.0.0.1:<port>/postgres
#   SLUICE_TEST_POSTGRES_DIR  the folder holding the cluster, its socket and its log
# Tests make one database per test from that URL (sluice_meta::test_suite::fresh_postgres_url).
#
# The server binaries come from /usr/lib/postgresql/15/bin (Debian's postgresql-15); when
# `initdb` is nowhere to be found the script installs that package with apt-get (root only),
# without letting it create or start the system's own cluster. As root, the cluster runs as
# the `postgres` user (PostgreSQL refuses to run as root).
set -euo pipefail

PG_VERSION=15
# A throwaway server for tests: durability is not wanted, speed is; enough connections for
# many test nodes at once (each holds a small pool plus one LISTEN connection).
PG_SETTINGS=(-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300)

log() { echo "postgres.sh: $*" >&2; }

bin_dir() {
    local d="/usr/lib/postgresql/$PG_VERSION/bin"
    if [[ -x "$d/initdb" ]]; then echo "$d"; return 0; fi
    if command -v pg_config >/dev/null 2>&1 && [[ -x "$(pg_config --bindir)/initdb" ]]; then
        pg_config --bindir; return 0
    fi
    if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return 0; fi
    return 1
}

install_postgres() {
    if [[ "$(id -u)" != 0 ]]; then
        log "initdb not found and not root: install postgresql-$PG_VERSION (Debian) first"
        exit 1
    fi
    log "initdb not found: installing postgresql-$PG_VERSION with apt-get"
    # Only the binaries are wanted: no system cluster created or started by the package.
    mkdir -p /etc/postgresql-common
    if ! grep -qs '^create_main_cluster *= *false' /etc/postgresql-common/createcluster.conf; then
        echo 'create_main_cluster = false' >>/etc/postgresql-common/createcluster.conf
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "postgresql-$PG_VERSION" >&2 \
        || { apt-get update -q >&2 && apt-get install -y -q "postgresql-$PG_VERSION" >&2; }
}

# Runs a command as the cluster's owner: `postgres` when we are root, else ourselves.
as_owner() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
    local bin dir password port attempt
    bin="$(bin_dir)" || { install_postgres; bin="$(bin_dir)"; }
    dir="$(mktemp -d -t sluice-pg-XXXXXX)"
    chmod 755 "$dir"
    [[ "$(id -u)" == 0 ]] && chown postgres: "$dir"
    password="sluice-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
    as_owner bash -c "umask 077 && printf '%s\n' '$password' >'$dir/pwfile'"
    as_owner "$bin/initdb" -D "$dir/data" -U sluice --pwfile="$dir/pwfile" \
        --auth=scram-sha-256 --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; log "initdb failed"; exit 1; }
    as_owner rm -f "$dir/pwfile"
    # A port picked free can be taken before the server binds it: try a few.
    for attempt in 1 2 3 4 5; do
        port="$(free_port)"
        if as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
            -o "-p $port -k $dir -c listen_addresses=127.0.0.1 ${PG_SETTINGS[*]}" start >&2; then
            echo "$port" >"$dir/port"
            log "PostgreSQL $PG_VERSION on 127.0.0.1:$port, folder $dir"
            echo "export SLUICE_TEST_POSTGRES_URL='postgres://sluice:$password@127.0.0.1:$port/postgres'"
            echo "export SLUICE_TEST_POSTGRES_DIR='$dir'"
            return 0
        fi
        log "start on port $port failed (attempt $attempt)"
    done
    tail -20 "$dir/server.log" >&2 || true
    rm -rf "$dir"
    exit 1
}

stop() {
    local dir="${1:-${SLUICE_TEST_POSTGRES_DIR:-}}" bin
    if [[ -z "$dir" || ! -d "$dir" ]]; then
        log "stop: no cluster folder given (pass the SLUICE_TEST_POSTGRES_DIR that start printed)"
        exit 1
    fi
    if [[ -f "$dir/data/postmaster.pid" ]] && bin="$(bin_dir)"; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || log "pg_ctl stop failed"
    fi
    rm -rf "$dir"
    log "stopped and removed $dir"
}

# Stops the server of DIR but keeps its data, to simulate the metastore going away.
down() {
    local dir="${1:-}" bin
    [[ -n "$dir" && -d "$dir/data" ]] || { log "down: no cluster folder [$dir]"; exit 1; }
    bin="$(bin_dir)"
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2
}

# Starts the server of DIR again, on the port it had.
up() {
    local dir="${1:-}" bin port
    [[ -n "$dir" && -f "$dir/port" ]] || { log "up: no cluster folder [$dir]"; exit 1; }
    bin="$(bin_dir)"
    port="$(cat "$dir/port")"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 ${PG_SETTINGS[*]}" start >&2
}

case "${1:-}" in
    start) start ;;
    stop) stop "${2:-}" ;;
    down) down "${2:-}" ;;
    up) up "${2:-}" ;;
    *)
        echo "usage: $0 start | $0 stop DIR | $0 down DIR | $0 up DIR" >&2
        exit 2
        ;;
esac
