#!/usr/bin/env bash
# Simulator and memory benchmarks (issue 7), on whole release-build
# processes (report writing included), medians of N repeats:
#   1. the full paper grid: `plbbench experiment --cluster sim` (4 strategies
#      x 3 mixes x 2 presets x 5 repeats, T=1000, 300 simulated s each);
#   2. one cascade run at T = 1k, 10k, 100k clients (cost vs T), with the
#      peak RSS of each (memory target: T=100k in <= 1 GiB);
#   3. one run without faults at T=10k for 300, 600, 1200, 2400 simulated s
#      (cost vs run length, via --time-scale 1, 2, 4, 8).
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
    timed "$bin" experiment --cluster sim --quiet --checks warn --out "$out/grid"
    walls+=("$wall")
done
printf 'full paper grid (120 sim runs, T=1000, 300 s each): median %.2f s wall of %d (target <= 60 s)\n\n' \
    "$(printf '%s\n' "${walls[@]}" | median)" "$n"

# row LABEL ARGS...: median wall and max peak RSS of N runs.
row() {
    local label=$1 walls=() peak=0 i
    shift
    for i in $(seq "$n"); do
        timed "$bin" run --cluster sim --seed "$i" --quiet --checks warn --force --out "$out/run" "$@"
        walls+=("$wall"); (( rss > peak )) && peak=$rss
    done
    printf '| %s | %.3f | %.1f |\n' "$label" "$(printf '%s\n' "${walls[@]}" | median)" "$(echo "$peak / 1024" | bc -l)"
}
echo "| clients T (300 simulated s) | median wall s | peak RSS MiB |"
echo "| --- | --- | --- |"
for t in 1000 10000 100000; do row "$t" --faults cascade --T "$t"; done
echo
echo "| simulated seconds (T=10000, no faults) | median wall s | peak RSS MiB |"
echo "| --- | --- | --- |"
for x in 1 2 4 8; do row "$((300 * x))" --faults none --T 10000 --time-scale "$x"; done
