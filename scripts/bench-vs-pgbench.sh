#!/usr/bin/env bash
# plbbench bench against pgbench, side by side (docs/performance.md): one local
# PostgreSQL server without a CPU quota in a temporary directory (loopback
# only, trust auth, fsync off, removed on exit), `pgbench -i -s SCALE`, then
# for each protocol (prepared, simple) and client count (16, 64) PAIRS pairs
# of `pgbench -S -M MODE -c N -j 2 -T SECONDS` and the equivalent
# `plbbench bench` (the same SELECT on a random aid, N connections, 2
# threads), alternating which goes first. Each tool's own CPU (user +
# system of the client process, from GNU time) is divided by the queries
# it completed. Prints each pair, then per cell the median ratios
# plbbench / pgbench of throughput (target >= 1.0) and of CPU per query
# (issue 50's target: <= 0.8) and the load average before the cell.
# With FIGURES=FILE, appends one CSV row per pair and cell to FILE
# (figure,unit,better,repeat,value,command: ci/perf.sh's format).
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

# run_pgbench MODE N / run_plbbench MODE N: one measurement, printed as
# "rate queries cpu_us_per_query" (the client's user + system CPU).
timer=(/usr/bin/time -f '%U %S' -o "$work/time")
cpu_per_query() {
    local u s
    read -r u s <"$work/time"
    echo "($u + $s) * 1000000 / $1" | bc -l
}
run_pgbench() {
    local out rate n
    out=$("${timer[@]}" "$pgbench" -n -S -M "$1" -c "$2" -j 2 -T "$secs" 2>/dev/null)
    rate=$(sed -n 's/^tps = \([0-9.]*\).*without initial connection time.*/\1/p' <<<"$out")
    n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    [[ -n $rate && -n $n && $n -gt 0 ]] || return 0
    echo "$rate $n $(cpu_per_query "$n")"
}
run_plbbench() {
    local prepared=() out rate n
    [[ $1 == prepared ]] && prepared=(--prepared)
    out=$(plbbench_select "${prepared[@]}" -c "$2" -j 2 -T "$secs" --format json)
    rate=$(sed -n 's/^ *"qps": \([0-9.]*\),*$/\1/p' <<<"$out")
    n=$(sed -n 's/^ *"queries": \([0-9]*\),*$/\1/p' <<<"$out")
    [[ -n $rate && -n $n && $n -gt 0 ]] || return 0
    echo "$rate $n $(cpu_per_query "$n")"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# figure NAME UNIT BETTER REPEAT VALUE: one row of FIGURES, when set.
figure() {
    [[ -n ${FIGURES:-} ]] || return 0
    echo "$1,$2,$3,$4,$5,\"bash scripts/bench-vs-pgbench.sh $pairs $secs $scale '$n' $mode\"" >>"$FIGURES"
}

summary=()
echo "| protocol | clients | pair | first | pgbench tps | plbbench qps | ratio | pgbench CPU us/query | plbbench | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for mode in $modes; do
    for n in $clients_list; do
        load=$(cut -d ' ' -f 1 /proc/loadavg)
        ratios=() cpus=()
        for i in $(seq "$pairs"); do
            if (( i % 2 )); then
                first=pgbench; a=$(run_pgbench "$mode" "$n"); b=$(run_plbbench "$mode" "$n")
            else
                first=plbbench; b=$(run_plbbench "$mode" "$n"); a=$(run_pgbench "$mode" "$n")
            fi
            [[ -n "$a" && -n "$b" ]] || die "$mode, $n clients, pair $i: a run printed no rate (pgbench '$a', plbbench '$b')"
            read -r ta _ ca <<<"$a"
            read -r tb _ cb <<<"$b"
            r=$(echo "$tb / $ta" | bc -l)
            c=$(echo "$cb / $ca" | bc -l)
            ratios+=("$r")
            cpus+=("$c")
            figure "generator.qps_ratio.$mode.c$n" ratio higher "$i" "$(printf '%.4f' "$r")"
            figure "generator.cpu_ratio.$mode.c$n" ratio lower "$i" "$(printf '%.4f' "$c")"
            printf '| %s | %d | %d | %s | %.0f | %.0f | %.3f | %.2f | %.2f | %.3f |\n' "$mode" "$n" "$i" "$first" "$ta" "$tb" "$r" "$ca" "$cb" "$c"
        done
        summary+=("$(printf '| %s | %d | %.3f | %.3f | %s |' "$mode" "$n" "$(printf '%s\n' "${ratios[@]}" | median)" \
            "$(printf '%s\n' "${cpus[@]}" | median)" "$load")")
    done
done
echo
echo "| protocol | clients | median qps ratio plbbench/pgbench over $pairs pairs (target >= 1.0) | median CPU per query ratio (target <= 0.8) | 1-min load before |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${summary[@]}"
