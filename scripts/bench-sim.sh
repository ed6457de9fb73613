#!/usr/bin/env bash
# Simulator and memory benchmarks (docs/performance.md), on whole release-build
# processes (report writing included), medians of N repeats:
#   1. the full paper grid: `plbbench experiment --cluster sim` (4 strategies
#      x 3 mixes x 2 presets x 5 repeats, T=1000, 300 simulated s each);
#   2. one cascade run at T = 1k, 10k, 100k clients (cost vs T), with the
#      peak RSS of each (memory target: T=100k in <= 1 GiB);
#   3. cost vs run length (docs/performance.md, "The simulator's cost"): one cascade run at T=1k and at T=10k
#      for 300, 600, 1200, 2400 simulated s (--time-scale 1, 2, 4, 8: the
#      same timeline stretched), with the wall time per simulated second,
#      the work simulated (queries sent plus sessions started, from
#      summary.json) per simulated second and the wall time per unit of it,
#      each with its max/min ratio over the four lengths, the marginal wall
#      time per simulated second between consecutive lengths (the slope of
#      wall time against run length, without the fixed cost of a process
#      and its report; target: flat within 15%), and the peak RSS.
# Every figure is of the steady workload (`--workload analytics`, the
# default until 2026-12-05), so the series stays comparable across dates.
# Prints markdown tables. Usage: scripts/bench-sim.sh [N (5)]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
cargo build --release --locked -q
bin=$PWD/target/release/plbbench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# timed CMD...: runs CMD quietly under /usr/bin/time; sets $wall (s) and $rss (KiB).
timed() {
    local s e
    s=$(date +%s.%N)
    /usr/bin/time -f '%M' -o "$out/rss" "$@" >/dev/null 2>"$out/stderr" || { cat "$out/stderr" >&2; return 1; }
    e=$(date +%s.%N)
    wall=$(echo "$e - $s" | bc -l)
    rss=$(tail -n 1 "$out/rss")
}

walls=()
for i in $(seq "$n"); do
    rm -rf "$out/grid"
    timed "$bin" experiment --cluster sim --workload analytics --quiet --checks warn --out "$out/grid"
    walls+=("$wall")
done
printf 'full paper grid (120 sim runs, T=1000, 300 s each): median %.2f s wall of %d (target <= 60 s)\n\n' \
    "$(printf '%s\n' "${walls[@]}" | median)" "$n"

# row LABEL ARGS...: median wall and max peak RSS of N runs.
row() {
    local label=$1 walls=() peak=0 i
    shift
    for i in $(seq "$n"); do
        timed "$bin" run --cluster sim --workload analytics --seed "$i" --quiet --checks warn --force --out "$out/run" "$@"
        walls+=("$wall"); (( rss > peak )) && peak=$rss
    done
    printf '| %s | %.3f | %.1f |\n' "$label" "$(printf '%s\n' "${walls[@]}" | median)" "$(echo "$peak / 1024" | bc -l)"
}
echo "| clients T (300 simulated s) | median wall s | peak RSS MiB |"
echo "| --- | --- | --- |"
for t in 1000 10000 100000; do row "$t" --faults cascade --T "$t"; done
echo
# work FILE: queries sent (completed or failed) plus sessions started, from a summary.json.
work() { python3 scripts/lib/sim-work.py "$1"; }
# length T: the run-length table of a cascade at T clients.
length() {
    local t=$1 x i walls rows=()
    for x in 1 2 4 8; do
        walls=()
        for i in $(seq "$n"); do
            timed "$bin" run --cluster sim --workload analytics --seed "$i" --quiet --checks warn --force --out "$out/run" \
                --faults cascade --T "$t" --time-scale "$x"
            walls+=("$wall")
        done
        rows+=("$((300 * x)) $(printf '%s\n' "${walls[@]}" | median) $(work "$out/run/summary.json") $rss")
    done
    printf '%s\n' "${rows[@]}" | awk -v t="$t" '{
            ms[NR] = 1000 * $2 / $1; rate[NR] = $3 / $1; us[NR] = 1e6 * $2 / $3
            m = "-"; if (NR > 1) { marg[NR - 1] = 1000 * ($2 - w) / ($1 - s); m = sprintf("%.3f", marg[NR - 1]) }
            s = $1; w = $2
            printf "| %d | %d | %.3f | %.3f | %s | %.0f | %.2f | %.1f |\n", t, $1, $2, ms[NR], m, rate[NR], us[NR], $4 / 1024 }
        function ratio(a, k,   i, lo, hi) { lo = hi = a[1]; for (i = 2; i <= k; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }; return hi / lo }
        END { printf "| %d | max/min | | %.2f | %.2f | %.2f | %.2f | |\n", t, ratio(ms, NR), ratio(marg, NR - 1), ratio(rate, NR), ratio(us, NR) }'
}
echo "| clients T (cascade) | simulated s | median wall s | wall ms per simulated s | marginal wall ms per simulated s (from the previous length) | queries + sessions per simulated s | wall us per query or session | peak RSS MiB (last run) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for t in 1000 10000; do length "$t"; done
