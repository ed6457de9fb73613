#!/usr/bin/env bash
# How long `plbbench proxy` takes to declare a replica down (docs/resilience.md,
# "What counts as failure evidence"), on a real local cluster with sessions
# open on every replica (the proxy routes by 5RR, so the 10 persistent
# pgbench clients, SELECT 1 at 200/s, hold two sessions on each; detection
# does not depend on the strategy): for each fault kind, TRIALS trials of r1
# failing under that load, the time from just before the fault to the proxy's
# `detect r1 down` line, then r1 restored and seen up again.
#   kill:  plbbench cluster fault down r1 (SIGKILL of the server's tree)
#   stop:  pg_ctl stop -m fast (57P01 to every session, then the postmaster exits)
#   pause: plbbench cluster fault pause r1 (SIGSTOP), then resume
# Usage: scripts/detection-delay.sh [BIN] [TRIALS] [PROBE_MS]
#   BIN defaults to target/release/plbbench, TRIALS to 5, PROBE_MS to the
#   proxy's default probe interval (1000). Prints one line per trial
#   (fault, trial, delay in ms, the detect line) and the load average.
# Needs PostgreSQL with pgbench (scripts/install-postgres.sh); run it with
# nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/plbbench}")
TRIALS=${2:-5}
PROBE_MS=${3:-1000}
WORK=$(mktemp -d /tmp/plbbench-detect.XXXXXX)
chmod 711 "$WORK"
export PLBBENCH_STATE_DIR="$WORK/state"
PROXY_PID=""
cleanup() {
    [[ -n "$PROXY_PID" ]] && kill "$PROXY_PID" 2>/dev/null && wait "$PROXY_PID" 2>/dev/null
    pkill -f "pgbench.*plbbench-detect" 2>/dev/null || true
    "$BIN" cluster down >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }

"$BIN" cluster up >"$WORK/up.txt"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Each stderr line of the proxy, stamped with the wall clock in ms.
"$BIN" proxy --strategy rr --listen "127.0.0.1:$PORT" --probe-interval-ms "$PROBE_MS" --T 40 \
    2> >(while IFS= read -r line; do echo "$(now_ms) $line"; done >"$WORK/proxy.log") >"$WORK/proxy.out" &
PROXY_PID=$!
for _ in $(seq 100); do grep -q listening "$WORK/proxy.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$WORK/proxy.out" || { echo "the proxy did not start: $(cat "$WORK/proxy.log")" >&2; exit 1; }
echo "SELECT 1;" >"$WORK/select1.sql"
DATA="$PLBBENCH_STATE_DIR/r1/data"
PGCTL="$(dirname "$(readlink -f "$(command -v pg_ctl || echo /usr/lib/postgresql/*/bin/pg_ctl)")")/pg_ctl"
[[ -x "$PGCTL" ]] || PGCTL=$(ls /usr/lib/postgresql/*/bin/pg_ctl | tail -1)

# Waits (up to 30 s) for the proxy's first `detect r1 WHAT` line stamped
# at or after $1 and prints "stamp line".
wait_for() {
    local since=$1 what=$2
    for _ in $(seq 3000); do
        local hit
        hit=$(awk -v s="$since" -v w="detect r1 $what" '$1 >= s && index($0, w) { print; exit }' "$WORK/proxy.log")
        if [[ -n "$hit" ]]; then echo "$hit"; return 0; fi
        sleep 0.01
    done
    echo "timeout"; return 1
}

for fault in kill stop pause; do
    for trial in $(seq "$TRIALS"); do
        load=()
        for app in premium-plbbench-detect free-plbbench-detect; do
            PGAPPNAME=$app timeout 60 pgbench -n -c 5 -R 100 -T 12 -f "$WORK/select1.sql" \
                "host=127.0.0.1 port=$PORT user=plbbench dbname=plbbench" >/dev/null 2>&1 &
            load+=($!)
        done
        sleep 3
        t0=$(now_ms)
        case $fault in
            kill) "$BIN" cluster fault down r1 >/dev/null ;;
            stop) runuser -u plbbench -- "$PGCTL" stop -m fast -D "$DATA" >/dev/null ;;
            pause) "$BIN" cluster fault pause r1 >/dev/null ;;
        esac
        hit=$(wait_for "$t0" down || true)
        stamp=${hit%% *}
        if [[ "$hit" == timeout ]]; then delay=timeout; else delay=$((stamp - t0)); fi
        echo "$fault trial $trial: ${delay} ms: ${hit#* }"
        sleep 2
        t1=$(now_ms)
        case $fault in
            pause) "$BIN" cluster fault resume r1 >/dev/null ;;
            *) "$BIN" cluster fault rejoin r1 >/dev/null ;;
        esac
        wait_for "$t1" up >/dev/null || echo "r1 not seen up again"
        wait "${load[@]}" || true
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
