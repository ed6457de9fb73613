#!/usr/bin/env bash
# Where the generator spends per query what pgbench does not (docs/performance.md):
# against one local server (scripts/lib/pgbench-server.sh), `pgbench -S -M
# MODE -c N -j 2` and the equivalent `plbbench bench` (`--prepared` for the
# prepared protocol) run
# for SECONDS each, first under `perf stat` (the generator's own CPU time,
# context switches and CPU migrations, per completed query) and then under
# `strace -c -f` (system calls per query, by call; strace slows both tools
# alike, so only the counts per query are compared, not the rates). Set
# PLBBENCH_B=/path/to/another/plbbench to profile a second build beside it
# (e.g. the previous commit's). Prints markdown tables.
# Usage: scripts/profile-generator.sh [SECONDS (5)] [CLIENTS (16)] [SCALE (10)] [MODE (prepared|simple)]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
clients=${2:-16}
scale=${3:-10}
mode=${4:-prepared}
case $mode in prepared) prep=(--prepared) ;; simple) prep=() ;; *) echo "profile-generator: MODE must be prepared or simple, not $mode" >&2; exit 2 ;; esac
command -v perf >/dev/null || { echo "profile-generator: perf not found (apt-get install linux-perf)" >&2; exit 1; }
command -v strace >/dev/null || { echo "profile-generator: strace not found (apt-get install strace)" >&2; exit 1; }
name=profile-generator
# shellcheck source=lib/pgbench-server.sh
source scripts/lib/pgbench-server.sh

tools=(pgbench plbbench)
[[ -n "${PLBBENCH_B:-}" ]] && tools+=(plbbench-b)
# run TOOL WRAPPER...: runs TOOL under WRAPPER; prints the queries it completed.
run() {
    local tool=$1
    shift
    case $tool in
        pgbench) "$@" "$pgbench" -n -S -M "$mode" -c "$clients" -j 2 -T "$secs" 2>/dev/null \
            | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' ;;
        plbbench) "$@" "$bin" bench --dsn "host=127.0.0.1 port=$port user=postgres dbname=postgres" \
            --query 'SELECT abalance FROM pgbench_accounts WHERE aid = $1' --key-range $((100000 * scale)) \
            "${prep[@]}" -c "$clients" -j 2 -T "$secs" --format json | sed -n 's/^ *"queries": \([0-9]*\),*$/\1/p' ;;
        plbbench-b) bin=$PLBBENCH_B run plbbench "$@" ;;
    esac
}
stat_field() { awk -F, -v e="$1" '$3 ~ e {print $1; exit}' "$2"; }

echo "protocol $mode, $clients clients, $secs s; load average before: $(cut -d ' ' -f 1-3 /proc/loadavg)"
echo
echo "| tool | queries/s | generator CPU us per query | context switches per query | CPU migrations per query |"
echo "| --- | --- | --- | --- | --- |"
for t in "${tools[@]}"; do
    q=$(run "$t" perf stat -x, -o "$work/perf.$t" -e task-clock,context-switches,cpu-migrations)
    cpu=$(stat_field task-clock "$work/perf.$t")
    cs=$(stat_field context-switches "$work/perf.$t")
    mig=$(stat_field cpu-migrations "$work/perf.$t")
    printf '| %s | %.0f | %.1f | %.2f | %.3f |\n' "$t" "$(echo "$q / $secs" | bc -l)" \
        "$(echo "$cpu * 1000 / $q" | bc -l)" "$(echo "$cs / $q" | bc -l)" "$(echo "$mig / $q" | bc -l)"
done
echo
for t in "${tools[@]}"; do
    q=$(run "$t" strace -c -f -o "$work/strace.$t")
    echo "$t under strace: $q queries; system calls per query (calls making up >= 1% of them):"
    awk -v q="$q" '$0 ~ /^ *[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ {
            calls = $4; name = $NF; if (name == "total") next; tot += calls; c[name] = calls }
        END { for (n in c) if (c[n] >= tot / 100) printf "  %-16s %6.2f\n", n, c[n] / q; printf "  %-16s %6.2f\n", "total", tot / q }' \
        "$work/strace.$t" | sort -k2 -g -r
done
