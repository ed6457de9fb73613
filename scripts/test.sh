#!/usr/bin/env bash
# The README's test command: sets up what is missing, then runs every test
# tier (unit and property tests, in-process CLI tests on the simulator, and
# integration tests against real local PostgreSQL servers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --release --locked --no-fail-fast -- --test-threads=2
