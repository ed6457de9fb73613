#!/usr/bin/env bash
# plbbench bench against pgbench, side by side (docs/performance.md): one local
# PostgreSQL server without a CPU quota in a temporary directory (loopback
# only, trust auth, fsync off, removed on exit), `pgbench -i -s SCALE`, then
# for each protocol (prepared, simple) and client count (16, 64) PAIRS pairs
# of `pgbench -S -M MODE -c N -j 2 -T SECONDS` and the equivalent
# `plbbench bench` (the same SELECT on a random aid, N connections, 2
# threads), alternating which goes first. Prints each pair, the median
# ratio plbbench qps / pgbench tps per cell (target >= 1.0) and the load
# average before each cell.
#
# Usage: scripts/bench-vs-pgbench.sh [PAIRS (3)] [SECONDS (10)] [SCALE (10)] [CLIENTS ("16 64")] [MODES ("prepared simple")]
# Run as root (the server runs as the `postgres` user) or as a normal user.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
secs=${2:-10}
scale=${3:-10}
clients_list=${4:-16 64}
modes=${5:-prepared simple}

name=bench-vs-pgbench
# shellcheck source=lib/pgbench-server.sh
source scripts/lib/pgbench-server.sh

# run_pgbench MODE N / run_plbbench MODE N: one measurement, its rate.
run_pgbench() {
    "$pgbench" -n -S -M "$1" -c "$2" -j 2 -T "$secs" 2>/dev/null \
        | sed -n 's/^tps = \([0-9.]*\).*without initial connection time.*/\1/p'
}
run_plbbench() {
    local prepared=()
    [[ $1 == prepared ]] && prepared=(--prepared)
    plbbench_select "${prepared[@]}" -c "$2" -j 2 -T "$secs" --format json \
        | sed -n 's/^ *"qps": \([0-9.]*\),*$/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

summary=()
echo "| protocol | clients | pair | first | pgbench tps | plbbench qps | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for mode in $modes; do
    for n in $clients_list; do
        load=$(cut -d ' ' -f 1 /proc/loadavg)
        ratios=()
        for i in $(seq "$pairs"); do
            if (( i % 2 )); then
                first=pgbench; a=$(run_pgbench "$mode" "$n"); b=$(run_plbbench "$mode" "$n")
            else
                first=plbbench; b=$(run_plbbench "$mode" "$n"); a=$(run_pgbench "$mode" "$n")
            fi
            [[ -n "$a" && -n "$b" ]] || die "$mode, $n clients, pair $i: a run printed no rate (pgbench '$a', plbbench '$b')"
            r=$(echo "$b / $a" | bc -l)
            ratios+=("$r")
            printf '| %s | %d | %d | %s | %.0f | %.0f | %.3f |\n' "$mode" "$n" "$i" "$first" "$a" "$b" "$r"
        done
        summary+=("$(printf '| %s | %d | %.3f | %s |' "$mode" "$n" "$(printf '%s\n' "${ratios[@]}" | median)" "$load")")
    done
done
echo
echo "| protocol | clients | median ratio plbbench/pgbench over $pairs pairs (target >= 1.0) | 1-min load before |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${summary[@]}"
