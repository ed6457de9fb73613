#!/usr/bin/env bash
# The paper's cascade with clients plbbench did not write (docs/proxy.md): a
# five-replica local cluster (`plbbench cluster up`, 0.3 cores each, in a
# private state directory, removed on exit), `pgbench -i -s 1` on every
# replica, then per strategy `plbbench proxy --strategy S` in front of it
# and two pgbench processes through it at once, told apart by
# application_name: Premium (PGAPPNAME=premium-...) and Freemium, each
# `-n -S -C` (a new session per transaction, so every transaction is
# routed) open loop at a Poisson rate (`-R`, latency counted from the
# scheduled start; `--latency-limit 2000` skips what is already 2 s late).
# The rate is set by a stated principle, not tuned: LOAD (0.5) of the
# cluster's capacity for this transaction, measured first as the closed-loop
# rate of one replica under its quota (`pgbench -C -S -c 4`) times five,
# split by MIX. The cascade preset's timeline, scaled to SECONDS: r1 down at
# 0.4, r2 at 0.5, r1 back at 0.7, r2 at 0.8. Prints per strategy, phase and
# class the transactions per second, p50 and p95 (ms) from pgbench's
# per-transaction logs, the skipped transactions and the aborted clients.
# ADMISSIONS runs each strategy once per `--admission` mode of the proxy
# (issue 64's check: "none modes" at LOAD 2.0). FREEMIUM "kept" gives the
# Freemium clients one session each for the whole run (no -C), so only the
# gate's statement holds, not its session gate, can shed them. Their
# transaction is then one CPU-bound statement (`SELECT count(*) FROM
# generate_series(1, 20000)`, about 2 ms of a core: a light -S on kept
# sessions saturates pgbench and the proxy on a 2-core machine long before
# the replicas), at LOAD of the cluster's capacity for it (one replica's
# closed-loop `-c 4`, times five), by the same principle as Premium's.
#
# Usage: scripts/proxy-cascade.sh [STRATEGIES ("plb rr")] [SECONDS (120)] [LOAD (0.5)] [PREMIUM_PCT (25)]
#                                 [ADMISSIONS ("none")] [FREEMIUM ("new" | "kept")]
# Run as root (the local cluster needs it).
set -euo pipefail
cd "$(dirname "$0")/.."
name=proxy-cascade
die() { printf '%s: error: %s\n' "$name" "$*" >&2; exit 1; }
log() { printf '%s: %s\n' "$name" "$*" >&2; }
strategies=${1:-plb rr}
secs=${2:-120}
load=${3:-0.5}
pct=${4:-25}
admissions=${5:-none}
freemium=${6:-new}
case $freemium in new) f_connect=(-C) ;; kept) f_connect=() ;; *) die "FREEMIUM must be new or kept, not $freemium" ;; esac
command -v pgbench >/dev/null || die "pgbench not found: run scripts/install-postgres.sh"

cargo build --release --locked -q
bin=$PWD/target/release/plbbench
work=$(mktemp -d /tmp/plbbench-proxy-cascade.XXXXXX)
chmod 755 "$work"
export PLBBENCH_STATE_DIR=$work/local
proxy_pid=
cleanup() {
    [[ -n $proxy_pid ]] && kill -INT "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null || true
    "$bin" cluster down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "cluster up (5 replicas, 0.3 cores each)"
"$bin" cluster up >"$work/dsns" 2>"$work/up.err" || { cat "$work/up.err" >&2; die "cluster up failed"; }
ports=($(grep -o 'port=[0-9]*' "$work/dsns" | cut -d= -f2))
export PGPASSWORD=$(grep -o 'password=[^ ]*' "$work/dsns" | head -1 | cut -d= -f2)
export PGUSER=plbbench PGDATABASE=plbbench PGHOST=127.0.0.1
for p in "${ports[@]}"; do pgbench -i -q -s 1 -p "$p" >/dev/null 2>&1 || die "pgbench -i on port $p failed"; done

capacity=$(pgbench -n -C -S -c 4 -j 1 -T 10 -p "${ports[2]}" 2>/dev/null \
    | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
[[ -n $capacity ]] || die "the capacity measurement printed no tps"
total=$(echo "$load * 5 * $capacity" | bc -l)
rate_p=$(printf '%.1f' "$(echo "$total * $pct / 100" | bc -l)")
rate_f=$(printf '%.1f' "$(echo "$total * (100 - $pct) / 100" | bc -l)")
f_work=(-S)
if [[ $freemium == kept ]]; then
    echo 'SELECT count(*) FROM generate_series(1, 20000);' >"$work/heavy.sql"
    f_work=(-f "$work/heavy.sql")
    kept_cap=$(pgbench -n "${f_work[@]}" -c 4 -j 1 -T 10 -p "${ports[2]}" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
    [[ -n $kept_cap ]] || die "the kept-session capacity measurement printed no tps"
    rate_f=$(printf '%.1f' "$(echo "$load * 5 * $kept_cap * (100 - $pct) / 100" | bc -l)")
    log "one replica: $kept_cap tps closed loop on kept sessions (Freemium's kind)"
fi
log "one replica: $capacity tps closed loop (new session per transaction); offered: $rate_p Premium + $rate_f Freemium tps (load $load)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
printf 'drain_s = 2\n[class]\nparam = "application_name"\npremium_prefix = "premium"\n' >"$work/proxy.toml"

at() { sleep "$(echo "$1 * $secs - ($(date +%s.%N) - $t0)" | bc -l | sed 's/^-.*/0/')"; }
echo "| strategy | phase | class | tps | p50 ms | p95 ms | skipped | aborted clients |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for sa in $(for s in $strategies; do for a in $admissions; do echo "$s+$a"; done; done); do
    s=${sa%+*} a=${sa#*+}
    [[ $a == none ]] || s=$sa
    pport=$(free_port)
    "$bin" proxy --config "$work/proxy.toml" --listen "127.0.0.1:$pport" --strategy "${sa%+*}" --admission "$a" --T 24 \
        --mix "$pct:$((100 - pct))" >"$work/$s.proxy.out" 2>"$work/$s.proxy.err" &
    proxy_pid=$!
    for _ in $(seq 100); do pgbench -n -S -t 1 -p "$pport" >/dev/null 2>&1 && break; sleep 0.2; done
    t0=$(date +%s.%N)
    common=(-n -j 1 -T "$secs" --latency-limit 2000 -p "$pport" -l)
    PGAPPNAME=premium-cascade pgbench "${common[@]}" -S -C -c 8 -R "$rate_p" --log-prefix="$work/$s-P" >"$work/$s-P.out" 2>&1 &
    pp=$!
    PGAPPNAME=free-cascade pgbench "${common[@]}" "${f_work[@]}" "${f_connect[@]}" -c 16 -R "$rate_f" \
        --log-prefix="$work/$s-F" >"$work/$s-F.out" 2>&1 &
    pf=$!
    at 0.4; "$bin" cluster fault down r1 >/dev/null 2>&1
    at 0.5; "$bin" cluster fault down r2 >/dev/null 2>&1
    at 0.7; "$bin" cluster fault rejoin r1 >/dev/null 2>&1
    at 0.8; "$bin" cluster fault rejoin r2 >/dev/null 2>&1
    wait "$pp" "$pf" || true
    kill -INT "$proxy_pid"; wait "$proxy_pid" || true; proxy_pid=
    for c in P F; do
        aborted=$(grep -c 'aborted in command' "$work/$s-$c.out" || true)
        cat "$work/$s-$c".[0-9]* | awk -v t0="$t0" -v T="$secs" '
            { x = ($5 + $6 / 1e6 - t0) / T
              p = x < 0.2 ? "" : x < 0.4 ? "baseline" : x < 0.5 ? "down1" : x < 0.7 ? "down2" : x < 0.8 ? "rejoin1" : "rejoin2"
              if (p != "") print p, ($3 == "skipped" ? "skipped" : $3 / 1000) }' >"$work/tx"
        first=1
        for p in baseline down1 down2 rejoin1 rejoin2; do
            awk -v p="$p" '$1 == p && $2 != "skipped" {print $2}' "$work/tx" | sort -g >"$work/lat"
            n=$(wc -l <"$work/lat")
            skipped=$(awk -v p="$p" '$1 == p && $2 == "skipped"' "$work/tx" | wc -l)
            q() { awk -v n="$n" -v f="$1" 'NR == int(n * f) + 1 {print; exit}' "$work/lat"; }
            case $p in down1|rejoin1) frac=0.1 ;; *) frac=0.2 ;; esac
            printf '| %s | %s | %s | %.1f | %.1f | %.1f | %d | %s |\n' "$s" "$p" "$([[ $c == P ]] && echo Premium || echo Freemium)" \
                "$(echo "$n / ($frac * $secs)" | bc -l)" "$(q 0.5)" "$(q 0.95)" "$skipped" "$([[ $first == 1 ]] && echo "$aborted")"
            first=0
        done
    done
    grep -E 'event' "$work/$s.proxy.err" | sed "s/^/$s: /" >&2 || true
    log "$s: 1-min load average $(cut -d ' ' -f 1 /proc/loadavg)"
done
log "1-min load average now: $(cut -d ' ' -f 1 /proc/loadavg)"
