#!/usr/bin/env bash
# Runs every test of the workspace: installs the programs the metrics and dashboard tests run
# when missing (scripts/test_tools.sh: promtool, headless Chromium, chromedriver), starts a
# throwaway PostgreSQL (scripts/postgres.sh) for the tests of the PostgreSQL metastore, runs
# `cargo test --workspace` with any extra arguments (e.g. --locked, or `-- filter`), and stops
# and deletes the server on exit, whatever happens.
#
# Usage: scripts/test.sh [cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/test_tools.sh
eval "$(scripts/postgres.sh start)"
trap 'scripts/postgres.sh stop "$SLUICE_TEST_POSTGRES_DIR"' EXIT

cargo test --workspace "$@"
