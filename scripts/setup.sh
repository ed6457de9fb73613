#!/usr/bin/env bash
# Installs everything plbbench and its tests need on a fresh Debian machine
# (PostgreSQL server and pgbench from Debian packages) and builds the release
# binary. Idempotent: what is already there is left alone. Headless Chromium
# (scripts/install-chromium.sh) is only needed to screenshot reports; set
# PLBBENCH_CHROMIUM=1 to install it here too.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-postgres.sh
if [[ "${PLBBENCH_CHROMIUM:-0}" == 1 ]]; then
    bash scripts/install-chromium.sh
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found: install Rust (rustup) first" >&2; exit 1; }
cargo build --release --locked
echo "setup: ready: target/release/plbbench"
