#!/usr/bin/env bash
# The README's main command: sets up what is missing, then runs the main job,
# PLB at mix 25:75 with T=1000 clients on a five-replica local PostgreSQL
# cluster under the premium-fault preset. Extra arguments go to `plbbench run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec target/release/plbbench run --strategy plb --mix 25:75 --T 1000 "$@"
