#!/usr/bin/env bash
# Installs everything plbbench and its tests need on a fresh Debian machine
# (PostgreSQL server and pgbench from Debian packages) and builds the release
# binary, Debian's headless Chromium for the report browser check
# (tests/browser.rs; PLBBENCH_CHROMIUM=0 skips it) and Debian's Prometheus
# for the live metrics check (tests/live_metrics.rs). Idempotent: what is
# already there is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-postgres.sh
bash scripts/install-prometheus.sh
if [[ "${PLBBENCH_CHROMIUM:-1}" == 1 ]]; then
    bash scripts/install-chromium.sh
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found: install Rust (rustup) first" >&2; exit 1; }
bash scripts/install-docker-deps.sh
cargo build --release --locked
echo "setup: ready: target/release/plbbench"
