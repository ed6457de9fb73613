#!/usr/bin/env bash
# The nightly performance gate (issue 50; docs/performance.md, "The nightly
# performance gate"): measures plbbench's own cost on this machine and
# compares it with ci/baseline/perf/perf.csv through ci/perf-gate.py.
#   1. the generator's CPU per query against pgbench's (and the throughput
#      ratio), prepared and simple, 16 and 64 connections, PAIRS alternating
#      pairs of 10 s (scripts/bench-vs-pgbench.sh);
#   2. the proxy's CPU per transaction against PgBouncer's (and the tps
#      ratio), `pgbench -S` and `-S -C`, 16, 64 and 256 clients, PAIRS
#      alternating rounds of 10 s (scripts/proxy-cost.sh);
#   3. the simulator's CPU per simulated query or session at K=5 (the main
#      job, T=1000; SIM_REPEATS runs) and at K=5,000 (T=1,000,000, the
#      steady workload; FLEET_REPEATS runs);
#   4. plbbench's RSS per open session at T=1000 (every session held open,
#      scripts/bench-mem-real.sh; MEM_REPEATS runs).
# Each figure is one CSV row per repeat in OUT/perf.csv; the judge prints the
# table, writes OUT/perf.md and exits 1 on a figure worse than its baseline
# beyond the noise band measured from the baseline's repeats, naming the
# figure and the command that measures it. PERF_DOCS=1 also rewrites the
# headline table of docs/performance.md from this run. About 40 minutes
# with the defaults; it starts real PostgreSQL servers, so run it on a quiet
# machine (it waits while /tmp/plbbench-quiet.lock exists).
# Refreshing the baseline after an intended change: copy OUT/perf.csv to
# ci/baseline/perf/perf.csv and commit it with the reason.
# Usage: ci/perf.sh [OUT (reports/nightly/perf-<utc>)]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-reports/nightly/perf-$(date -u +%Y%m%dT%H%M%SZ)}")
pairs=${PAIRS:-5}
sim_repeats=${SIM_REPEATS:-5}
fleet_repeats=${FLEET_REPEATS:-3}
mem_repeats=${MEM_REPEATS:-3}
baseline=${PERF_BASELINE:-ci/baseline/perf/perf.csv}
bash scripts/setup.sh
bash scripts/install-pgbouncer.sh >/dev/null
bin=$PWD/target/release/plbbench
mkdir -p "$out"
export FIGURES=$out/perf.csv
echo "figure,unit,better,repeat,value,command" >"$FIGURES"
for _ in $(seq 40); do [[ -e /tmp/plbbench-quiet.lock ]] || break; echo "perf: waiting for a quiet machine" >&2; sleep 30; done
echo "perf: 1-minute load average before: $(cut -d ' ' -f 1 /proc/loadavg)"

echo "perf: generator against pgbench -> $out/generator.md"
bash scripts/bench-vs-pgbench.sh "$pairs" 10 10 "16 64" "prepared simple" >"$out/generator.md"
echo "perf: proxy against PgBouncer -> $out/proxy.md"
bash scripts/proxy-cost.sh "$pairs" 10 10 "16 64 256" 5 "S S-C" >"$out/proxy.md"

# sim LABEL REPEATS ARGS...: CPU (user + system) per simulated query or
# session of `plbbench run --cluster sim ARGS`, one row per repeat.
sim() {
    local label=$1 n=$2 i u s work
    shift 2
    for i in $(seq "$n"); do
        rm -rf "$out/sim-run"
        /usr/bin/time -f '%U %S' -o "$out/time" "$bin" run --cluster sim --quiet --checks warn --out "$out/sim-run" "$@" >/dev/null
        read -r u s <"$out/time"
        work=$(python3 scripts/lib/sim-work.py "$out/sim-run/summary.json")
        printf 'sim.cpu_ns_per_query.%s,ns,lower,%d,%.1f,"plbbench run --cluster sim %s"\n' "$label" "$i" \
            "$(echo "($u + $s) * 1000000000 / $work" | bc -l)" "$*" >>"$FIGURES"
    done
    rm -rf "$out/sim-run" "$out/time"
}
echo "perf: simulator at K=5 and K=5,000"
sim k5 "$sim_repeats"
sim k5000 "$fleet_repeats" --workload analytics --replicas 5000 --T 1000000

echo "perf: memory per open session"
for i in $(seq "$mem_repeats"); do
    FIGURES_REPEAT=$i bash scripts/bench-mem-real.sh 250 1000 >"$out/memory-$i.md"
done
echo "perf: 1-minute load average after: $(cut -d ' ' -f 1 /proc/loadavg)"

docs=()
[[ ${PERF_DOCS:-0} == 1 ]] && docs=(--docs docs/performance.md)
python3 ci/perf-gate.py "$baseline" "$FIGURES" --markdown "$out/perf.md" "${docs[@]}"
