#!/usr/bin/env bash
# Every benchmark of docs/performance.md in turn, each printing its own table:
# the router micro-benchmarks (criterion medians), the simulator and its
# memory (scripts/bench-sim.sh), plbbench bench against pgbench
# (scripts/bench-vs-pgbench.sh), the generator's CPU and system calls per
# query (scripts/profile-generator.sh, when perf and strace are installed)
# and the memory of 1,000 held sessions (scripts/bench-mem-real.sh). The
# last three start real PostgreSQL servers and wait while
# /tmp/plbbench-quiet.lock exists. About 15 minutes here.
# Usage: scripts/bench-all.sh [N repeats for the simulator (5)]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
wait_quiet() { for _ in $(seq 40); do [[ -e /tmp/plbbench-quiet.lock ]] || return 0; echo "bench-all: waiting for a quiet machine" >&2; sleep 30; done; }

echo "## Router: one admission decision plus release (criterion, median)"
cargo bench --locked -q --bench router >/dev/null 2>&1 || cargo bench --locked --bench router
echo "| strategy | K | median ns |"
echo "| --- | --- | --- |"
for s in plb rr; do
    for k in 5 50 1000; do
        f=target/criterion/admit+release/$s/$k/new/estimates.json
        m=$(grep -o '"median":{[^}]*}[^}]*"point_estimate":[0-9.e+-]*' "$f" | sed 's/.*"point_estimate"://')
        printf '| %s | %s | %.1f |\n' "$s" "$k" "$m"
    done
done
echo
echo "## Simulator and its memory"
bash scripts/bench-sim.sh "$n"
echo
echo "## plbbench bench against pgbench"
wait_quiet
bash scripts/bench-vs-pgbench.sh
echo
echo "## The generator's cost per query against pgbench's"
if command -v perf >/dev/null && command -v strace >/dev/null; then
    wait_quiet
    bash scripts/profile-generator.sh 8 16
else
    echo "(skipped: perf and strace are not installed)"
fi
echo
echo "## Memory of real runs"
wait_quiet
bash scripts/bench-mem-real.sh
