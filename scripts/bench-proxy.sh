#!/usr/bin/env bash
# The cost of `plbbench proxy` (docs/proxy.md), with PgBouncer as the reference:
# one local PostgreSQL server without a CPU quota (scripts/lib/pgbench-
# server.sh: loopback, trust, fsync off, removed on exit), `pgbench -i -s
# SCALE`, then `plbbench proxy` in front of it (an external cluster of one
# replica, trust auth) and Debian's PgBouncer in session mode (trust). For
# each client count, ROUNDS rounds of `pgbench -n -S -c N -j 2 -T SECONDS`
# direct, through the proxy and through PgBouncer, the order rotating each
# round; latencies from pgbench's per-transaction log (-l). Prints every
# measurement, then per target and client count the median ratio of tps to
# direct's in the same round and the median p50 and p99 added to direct's,
# with the load average before each client count.
#
# Usage: scripts/bench-proxy.sh [ROUNDS (3)] [SECONDS (10)] [SCALE (10)] [CLIENTS ("16 64")]
# Run as root (the server and PgBouncer run as the `postgres` user).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/pgbouncer.sh
source scripts/lib/pgbouncer.sh
rounds=${1:-3}
secs=${2:-10}
scale=${3:-10}
clients_list=${4:-16 64}

name=bench-proxy
pgbouncer=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
[[ -x $pgbouncer ]] || { echo "$name: pgbouncer not found: run scripts/install-pgbouncer.sh" >&2; exit 1; }
# shellcheck source=lib/pgbench-server.sh
source scripts/lib/pgbench-server.sh

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
proxy_port=$(free_port)
bouncer_port=$(free_port)
pids=()
stop_helpers() {
    [[ -s $work/pgbouncer.pid ]] && kill -TERM "$(cat "$work/pgbouncer.pid")" 2>/dev/null || true
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    cleanup
}
trap stop_helpers EXIT

cat >"$work/proxy.toml" <<CFG
drain_s = 1
[class]
param = "application_name"
premium_prefix = "premium"
CFG
log "plbbench proxy on 127.0.0.1:$proxy_port"
"$bin" proxy --config "$work/proxy.toml" --listen "127.0.0.1:$proxy_port" --cluster external \
    --dsn "host=127.0.0.1 port=$port user=postgres dbname=postgres" --load-dataset --replicas 1 --strategy rr \
    --T 64 >"$work/proxy.out" 2>"$work/proxy.err" &
pids+=($!)

start_pgbouncer "$work" "$bouncer_port" "postgres = host=127.0.0.1 port=$port dbname=postgres user=postgres" postgres

for p in "$proxy_port" "$bouncer_port"; do
    for _ in $(seq 300); do
        "$pgbench" -n -S -c 1 -t 1 -p "$p" >/dev/null 2>&1 && break
        sleep 0.2
    done
    "$pgbench" -n -S -c 1 -t 1 -p "$p" >/dev/null 2>&1 || { cat "$work/proxy.err" >&2; die "nothing answers on port $p"; }
done

# measure TARGET_PORT N: "tps p50_ms p99_ms" of one pgbench run.
measure() {
    rm -f "$work"/lat*
    local tps
    tps=$("$pgbench" -n -S -c "$2" -j 2 -T "$secs" -p "$1" -l --log-prefix="$work/lat" 2>/dev/null \
        | sed -n 's/^tps = \([0-9.]*\).*without initial connection time.*/\1/p')
    [[ -n "$tps" ]] || die "pgbench on port $1 with $2 clients printed no tps"
    cat "$work"/lat* | awk '{print $3}' | sort -n | awk -v tps="$tps" \
        '{a[NR]=$1} END {printf "%s %.3f %.3f\n", tps, a[int(NR*0.5)+1]/1000, a[int(NR*0.99)+1]/1000}'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A port_of=([direct]=$port [plbbench-proxy]=$proxy_port [pgbouncer]=$bouncer_port)
order=(direct plbbench-proxy pgbouncer)
summary=()
echo "| clients | round | target | tps | p50 ms | p99 ms |"
echo "| --- | --- | --- | --- | --- | --- |"
for n in $clients_list; do
    load=$(cut -d ' ' -f 1 /proc/loadavg)
    declare -A ratio=() p50=() p99=()
    for i in $(seq "$rounds"); do
        declare -A got=()
        for j in 0 1 2; do
            t=${order[$(( (i + j) % 3 ))]}
            got[$t]=$(measure "${port_of[$t]}" "$n")
            read -r a b c <<<"${got[$t]}"
            printf '| %d | %d | %s | %.0f | %.3f | %.3f |\n' "$n" "$i" "$t" "$a" "$b" "$c"
        done
        read -r dt d50 d99 <<<"${got[direct]}"
        for t in plbbench-proxy pgbouncer; do
            read -r a b c <<<"${got[$t]}"
            ratio[$t]+="$(echo "$a / $dt" | bc -l) "
            p50[$t]+="$(echo "$b - $d50" | bc -l) "
            p99[$t]+="$(echo "$c - $d99" | bc -l) "
        done
    done
    for t in plbbench-proxy pgbouncer; do
        summary+=("$(printf '| %s | %d | %.3f | %+.3f | %+.3f | %s |' "$t" "$n" \
            "$(tr ' ' '\n' <<<"${ratio[$t]}" | grep . | median)" \
            "$(tr ' ' '\n' <<<"${p50[$t]}" | grep . | median)" \
            "$(tr ' ' '\n' <<<"${p99[$t]}" | grep . | median)" "$load")")
    done
done
echo
echo "| target | clients | median tps / direct over $rounds rounds (goal >= 0.9) | p50 added, ms | p99 added, ms | 1-min load before |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${summary[@]}"
