#!/usr/bin/env bash
# Installs everything plbbench and its tests need on a fresh Debian machine
# (PostgreSQL server and pgbench from Debian packages) and builds the release
# binary, Debian's headless Chromium for the report browser check
# (tests/browser.rs; PLBBENCH_CHROMIUM=0 skips it) and Debian's Prometheus
# for the live metrics check (tests/live_metrics.rs), a JDK and Debian's
# pgjdbc for the proxy's pgjdbc checks (tests/proxy_real.rs; PLBBENCH_JDBC=0
# skips it), and a Python virtual environment with psycopg 3 and asyncpg
# for the proxy's Python check (target/pyclients; PLBBENCH_PYCLIENTS=0
# skips it). Idempotent: what is
# already there is left alone. One line per step: apt's and cargo's output
# go to target/setup.log (scripts/lib/quiet.sh), whose last lines are
# printed if a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/quiet.sh
source scripts/lib/quiet.sh
# One apt-get update for every install step below (scripts/lib/quiet.sh).
APT_DIR=$(mktemp -d)
trap 'rm -rf "$APT_DIR"' EXIT
export PLBBENCH_APT_ONCE="$APT_DIR/updated"

bash scripts/install-postgres.sh
bash scripts/install-prometheus.sh
bash scripts/install-jdbc.sh
bash scripts/install-pyclients.sh
if [[ "${PLBBENCH_CHROMIUM:-1}" == 1 ]]; then
    bash scripts/install-chromium.sh
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found: install Rust (rustup) first" >&2; exit 1; }
bash scripts/install-docker-deps.sh
quiet_step setup "building target/release/plbbench (cargo build --release --locked; log: $QUIET_LOG)" \
    cargo build --release --locked
echo "setup: ready: target/release/plbbench"
