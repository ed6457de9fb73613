#!/usr/bin/env bash
# Simulator benchmark: wall time of whole `plbbench run --cluster sim`
# processes (300 simulated seconds, cascade, plb, release build), median of
# N runs, for T = 1k, 10k and 100k clients (cost should grow about
# linearly in T). Prints a markdown table. Usage: scripts/bench-sim.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
cargo build --release --locked -q
bin=target/release/plbbench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "| T | median wall s (of $n) | peak RSS MiB |"
echo "| --- | --- | --- |"
for t in 1000 10000 100000; do
    walls=(); rss=0
    for i in $(seq "$n"); do
        s=$(date +%s.%N)
        /usr/bin/time -f '%M' -o "$out/rss" "$bin" run --cluster sim --faults cascade --T "$t" --seed "$i" --quiet --force --out "$out/run" >/dev/null 2>&1
        e=$(date +%s.%N)
        walls+=("$(echo "$e - $s" | bc -l)")
        r=$(cat "$out/rss"); (( r > rss )) && rss=$r
    done
    printf '| %s | %.3f | %.1f |\n' "$t" "$(printf '%s\n' "${walls[@]}" | median)" "$(echo "$rss / 1024" | bc -l)"
done
