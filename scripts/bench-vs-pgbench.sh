#!/usr/bin/env bash
# plbbench bench against pgbench, side by side (issues 7 and 19): one local
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

die() { printf 'bench-vs-pgbench: error: %s\n' "$*" >&2; exit 1; }
log() { printf 'bench-vs-pgbench: %s\n' "$*" >&2; }

bindir=
for d in ${PLBBENCH_PG_BIN:-} $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then bindir=$d; break; fi
done
[[ -n "$bindir" ]] || die "PostgreSQL server binaries not found: run scripts/install-postgres.sh"
pgbench=$(command -v pgbench || true)
[[ -n "$pgbench" ]] || pgbench="$bindir/pgbench"
[[ -x "$pgbench" ]] || die "pgbench not found: run scripts/install-postgres.sh"

cargo build --release --locked -q
bin=$PWD/target/release/plbbench

work=$(mktemp -d /tmp/plbbench-vs-pgbench.XXXXXX)
chmod 755 "$work"
as_pg=()
if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "running as root but there is no postgres user to run the server"
    chown postgres: "$work"
    as_pg=(runuser -u postgres --)
fi
port=$(( 20000 + RANDOM % 20000 ))
cleanup() {
    "${as_pg[@]}" "$bindir/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "initdb and start on 127.0.0.1:$port ($("$bindir/postgres" --version))"
"${as_pg[@]}" "$bindir/initdb" -D "$work/data" -U postgres --auth=trust -E UTF8 >"$work/initdb.log" 2>&1 || { cat "$work/initdb.log" >&2; die "initdb failed"; }
"${as_pg[@]}" "$bindir/pg_ctl" -D "$work/data" -l "$work/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $work -c max_connections=200 -c fsync=off" start >/dev/null \
    || { cat "$work/server.log" >&2; die "server did not start"; }

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
log "pgbench -i -s $scale"
"$pgbench" -i -q -s "$scale" >"$work/init.log" 2>&1 || { cat "$work/init.log" >&2; die "pgbench -i failed"; }

# run_pgbench MODE N / run_plbbench MODE N: one measurement, its rate.
run_pgbench() {
    "$pgbench" -n -S -M "$1" -c "$2" -j 2 -T "$secs" 2>/dev/null \
        | sed -n 's/^tps = \([0-9.]*\).*without initial connection time.*/\1/p'
}
run_plbbench() {
    local prepared=()
    [[ $1 == prepared ]] && prepared=(--prepared)
    "$bin" bench --dsn "host=127.0.0.1 port=$port user=postgres dbname=postgres" \
        --query 'SELECT abalance FROM pgbench_accounts WHERE aid = $1' --key-range $((100000 * scale)) \
        "${prepared[@]}" -c "$2" -j 2 -T "$secs" --format json \
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
