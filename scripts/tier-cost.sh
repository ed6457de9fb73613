#!/usr/bin/env bash
# Throughput and CPU per transaction of a tier of `plbbench proxy` processes
# beside one PgBouncer (docs/performance.md, "A tier of proxies"; issue 51
# part 5). A one-replica plbbench local cluster (private state directory,
# `cluster down` on exit) loaded with `pgbench -i -s SCALE`; Debian's
# PgBouncer in session mode in front of it; for each tier size N in TIERS, N
# proxies (`--tier` with peer ids 1..N; a lone proxy for N = 1; trust on
# loopback, rr, kept server connections sized and timed as PgBouncer's pool
# split over the members), each in a session of its own. For each client
# count C and mode, ROUNDS rounds alternating the order: N pgbench processes
# at once (`-n -S [-C] -j 2 -T SECONDS`, C/N clients each), process i
# against member i, then the same N processes against the one PgBouncer.
# The middlemen's CPU (user + system of every member, or of PgBouncer) is
# read from /proc before and after and divided by the transactions the N
# pgbench processes completed; tps is their sum. Prints a markdown table
# per round and the medians with the tier's ratios to PgBouncer.
#
# Usage: scripts/tier-cost.sh [ROUNDS (3)] [SECONDS (10)] [SCALE (10)] [CLIENTS ("64 256")] [TIERS ("1 2 3")] [MODES ("S S-C")]
# Bounded: every pgbench run is killed 60 s past SECONDS. Run as root or as
# a user that may run `plbbench cluster up`; as root, PgBouncer runs as the
# `postgres` user (it refuses root).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
# shellcheck source=lib/pgbouncer.sh
source scripts/lib/pgbouncer.sh
# shellcheck source=lib/cost.sh
source scripts/lib/cost.sh
rounds=${1:-3}
secs=${2:-10}
scale=${3:-10}
clients_list=${4:-64 256}
tiers=${5:-1 2 3}
modes=${6:-S S-C}
name=tier-cost
die() { printf '%s: error: %s\n' "$name" "$*" >&2; exit 1; }
log() { printf '%s: %s\n' "$name" "$*" >&2; }
for m in $modes; do [[ $m == S || $m == S-C ]] || { echo "$name: MODES: S or S-C, not $m" >&2; exit 2; }; done
for n in $tiers; do [[ $n =~ ^[1-8]$ ]] || { echo "$name: TIERS: 1 to 8 proxies, not $n" >&2; exit 2; }; done
most=0
for c in $clients_list; do (( c > most )) && most=$c; done

cost_tools
members=()
stop_members() {
    local p
    for p in "${members[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    for p in "${members[@]}"; do wait "$p" 2>/dev/null || true; done
    members=()
}
cleanup() {
    [[ -s $work/pgbouncer.pid ]] && { kill -TERM "$(cat "$work/pgbouncer.pid")" 2>/dev/null || true; }
    stop_members
    "$bin" cluster down >/dev/null 2>&1 || log "cluster down failed: see $work"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cost_cluster "$scale"
bouncer_port=$(free_port)
PGBOUNCER_POOL=$((most + 4)) PGBOUNCER_IDLE=2 start_pgbouncer "$work" "$bouncer_port" "plbbench = host=127.0.0.1 port=$port dbname=plbbench user=plbbench password=$password" plbbench

# answers PORT: waits until pgbench gets a transaction through PORT.
answers() {
    for _ in $(seq 150); do
        "$pgbench" -n -S -c 1 -t 1 -h 127.0.0.1 -p "$1" -U plbbench plbbench >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "nothing answers on port $1: $(tail -3 "$work"/member*.err 2>/dev/null)"
}
answers "$bouncer_port"
bouncer_pid=$(cat "$work/pgbouncer.pid")

# start_tier N: N members (a lone proxy for 1), their pids in members and
# ports in member_ports.
member_ports=()
start_tier() {
    local n=$1 i p tier=()
    member_ports=()
    printf 'server_pool = %d\nserver_idle_timeout_s = 2\n' "$(( most / n + 4 ))" >"$work/proxy.toml"
    for i in $(seq "$n"); do
        p=$(free_port)
        (( n > 1 )) && tier=(--tier "tc$n" --peer-id "$i")
        setsid "$bin" proxy --config "$work/proxy.toml" --replicas 1 --strategy rr --T "$most" --listen "127.0.0.1:$p" \
            "${tier[@]}" >"$work/member$i.out" 2>"$work/member$i.err" &
        members+=("$!")
        member_ports+=("$p")
    done
    for p in "${member_ports[@]}"; do answers "$p"; done
}

# bench MODE C PORT...: C clients split over one pgbench process per PORT,
# at once; prints "tps transactions" summed.
bench() {
    local mode=$1 c=$2 connect=() i=0 k pids=() tps=0 txns=0 out t x
    shift 2
    k=$#
    [[ $mode == S-C ]] && connect=(-C)
    for p in "$@"; do
        local share=$(( c / k + (i < c % k ? 1 : 0) ))
        timeout $((secs + 60)) "$pgbench" -n -S "${connect[@]}" -c "$share" -j 2 -T "$secs" -h 127.0.0.1 -p "$p" \
            -U plbbench plbbench >"$work/bench$i.out" 2>&1 &
        pids+=("$!")
        i=$((i + 1))
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || die "pgbench $i failed: $(tail -3 "$work/bench$i.out")"
        out=$(cat "$work/bench$i.out")
        t=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | tail -1)
        x=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
        [[ -n $t && -n $x && $x -gt 0 ]] || die "pgbench $i printed no tps: $out"
        tps=$(echo "$tps + $t" | bc -l)
        txns=$((txns + x))
    done
    echo "$tps $txns"
}

# cpu PID...: user + system clock ticks of the processes so far, summed.
cpu() {
    local sum=0 p c
    for p in "$@"; do read -r c _ <<<"$(cpu_ticks "$p")"; sum=$((sum + c)); done
    echo "$sum"
}

# measure MODE C "PIDS" PORT...: "tps cpu_us_per_txn" of one run.
measure() {
    local mode=$1 c=$2 pids=$3 before after tps txns
    shift 3
    # shellcheck disable=SC2086
    before=$(cpu $pids)
    read -r tps txns <<<"$(bench "$mode" "$c" "$@")"
    # shellcheck disable=SC2086
    after=$(cpu $pids)
    echo "$tps $(echo "($after - $before) * 1000000 / $tick / $txns" | bc -l)"
}

declare -A tps_all=() cpu_all=()
echo "| middleman | mode | clients | round | tps | CPU us/txn |"
echo "| --- | --- | --- | --- | --- | --- |"
for n in $tiers; do
    start_tier "$n"
    bouncer_ports=()
    for _ in $(seq "$n"); do bouncer_ports+=("$bouncer_port"); done
    log "$n proxies up (pids ${members[*]})"
    for mode in $modes; do
        for c in $clients_list; do
            for i in $(seq "$rounds"); do
                if (( i % 2 )); then order=(tier pgbouncer); else order=(pgbouncer tier); fi
                for t in "${order[@]}"; do
                    sleep 4  # idle server connections close (idle timeout 2 s)
                    if [[ $t == tier ]]; then
                        got=$(measure "$mode" "$c" "${members[*]}" "${member_ports[@]}")
                        label="plbbench x$n"
                    else
                        got=$(measure "$mode" "$c" "$bouncer_pid" "${bouncer_ports[@]}")
                        label="PgBouncer ($n pgbench)"
                    fi
                    read -r tps cpu_us <<<"$got"
                    printf '| %s | %s | %d | %d | %.0f | %.2f |\n' "$label" "$mode" "$c" "$i" "$tps" "$cpu_us"
                    tps_all[$t,$n,$mode,$c]+="$tps "
                    cpu_all[$t,$n,$mode,$c]+="$cpu_us "
                done
            done
        done
    done
    stop_members
done
med() { tr ' ' '\n' <<<"${1:-}" | grep . | median; }
echo
echo "| mode | clients | proxies | tps plbbench | PgBouncer | ratio | CPU us/txn plbbench (all members) | PgBouncer | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for mode in $modes; do
    for c in $clients_list; do
        for n in $tiers; do
            tp=$(med "${tps_all[tier,$n,$mode,$c]}") tb=$(med "${tps_all[pgbouncer,$n,$mode,$c]}")
            cp=$(med "${cpu_all[tier,$n,$mode,$c]}") cb=$(med "${cpu_all[pgbouncer,$n,$mode,$c]}")
            printf '| %s | %d | %d | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f |\n' "$mode" "$c" "$n" "$tp" "$tb" \
                "$(echo "$tp / $tb" | bc -l)" "$cp" "$cb" "$(echo "$cp / $cb" | bc -l)"
        done
    done
done
echo
echo "medians over $rounds rounds of pgbench -n -S (-C in mode S-C) -j 2 -T $secs (scale $scale), the clients split over" \
    "one pgbench process per member (the same split against the one PgBouncer); $(nproc) cores," \
    "1-min load $(cut -d ' ' -f 1 /proc/loadavg) at the end"
