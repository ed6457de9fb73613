#!/usr/bin/env bash
# The CPU and system calls `plbbench proxy` spends per relayed transaction,
# beside PgBouncer's (docs/performance.md, "The proxy's own cost"). A
# one-replica plbbench local cluster (`plbbench cluster up --replicas 1` in
# a private state directory, `cluster down` on exit) loaded with `pgbench -i
# -s SCALE`; in front of it `plbbench proxy` (trust on loopback, rr, its
# kept server connections sized and timed as PgBouncer's) and Debian's PgBouncer in session mode (a temporary config on
# 127.0.0.1, stopped on exit). For each client count, ROUNDS rounds of
# `pgbench -n -S -c N -j 2 -T SECONDS` through each, the order alternating
# each round. Around each pgbench run the middleman's CPU is read from
# /proc/PID/stat (user + system, whole process) and its system calls are
# counted by `perf stat -e raw_syscalls:sys_enter -p PID` when perf works
# here; else by `strace -c -f -p PID` in a separate run of the same length
# (strace slows the process, so its CPU is not taken from that run); else
# they are "not measured". Its context switches are read from
# /proc/PID/task/*/status (summed over its threads): voluntary ones are its
# sleeps (each one a wake-up later), nonvoluntary ones its preemptions. All
# are divided by the transactions pgbench completed. Before the runs, each
# middleman's wake-ups per second while idle (no client) are counted over
# IDLE seconds. The proxy runs in a session of its own (`setsid`), as
# PgBouncer does once it daemonises: otherwise the kernel's autogroup
# scheduling would put it in one CPU group with pgbench and PgBouncer in a
# group alone. Prints a markdown table (tool, clients, round, tps, CPU
# us/txn and its user-mode part, syscalls/txn, sleeps/txn,
# preemptions/txn), then per client count
# the medians and plbbench's ratios to PgBouncer's.
#
# MODES picks the pgbench runs: `S` is `-S` (a connection held for the
# whole run), `S-C` is `-S -C` (a new connection per transaction: the login
# path that PLB routes on; PgBouncer hands each login a pooled server
# connection). With FIGURES=FILE, appends per round and cell the ratios
# plbbench / PgBouncer of CPU per transaction and of tps to FILE as CSV
# (figure,unit,better,repeat,value,command: ci/perf.sh's format).
#
# Usage: scripts/proxy-cost.sh [ROUNDS (3)] [SECONDS (10)] [SCALE (10)] [CLIENTS ("16 64")] [IDLE (10)] [MODES ("S")]
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
clients_list=${4:-16 64}
idle_secs=${5:-10}
modes=${6:-S}
most=0
for n in $clients_list; do (( n > most )) && most=$n; done
for m in $modes; do [[ $m == S || $m == S-C ]] || { echo "proxy-cost: MODES: S or S-C, not $m" >&2; exit 2; }; done
name=proxy-cost

die() { printf '%s: error: %s\n' "$name" "$*" >&2; exit 1; }
log() { printf '%s: %s\n' "$name" "$*" >&2; }

cost_tools
proxy_pid=
cleanup() {
    if [[ -s $work/pgbouncer.pid ]]; then
        kill -TERM "$(cat "$work/pgbouncer.pid")" 2>/dev/null || true
    fi
    if [[ -n $proxy_pid ]]; then
        kill -INT "$proxy_pid" 2>/dev/null || true
        wait "$proxy_pid" 2>/dev/null || true
    fi
    "$bin" cluster down >/dev/null 2>&1 || log "cluster down failed: see $work"
    for _ in $(seq 50); do
        [[ -s $work/pgbouncer.pid ]] && kill -0 "$(cat "$work/pgbouncer.pid")" 2>/dev/null || break
        sleep 0.1
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cost_cluster "$scale"

proxy_port=$(free_port)
log "plbbench proxy on 127.0.0.1:$proxy_port (a session of its own)"
# setsid execs the proxy in this process (a background job is no process
# group leader), so $! is the proxy's pid.
# Its kept server connections sized and timed as PgBouncer's pool below.
printf 'server_pool = %d\nserver_idle_timeout_s = 2\n' "$((most + 4))" >"$work/proxy.toml"
setsid "$bin" proxy --config "$work/proxy.toml" --replicas 1 --strategy rr --T "$most" --listen "127.0.0.1:$proxy_port" \
    >"$work/proxy.out" 2>"$work/proxy.err" &
proxy_pid=$!

bouncer_port=$(free_port)
# A pool for the most clients; idle server connections close after 2 s
# (the proxy's kept ones too) so that the two middlemen's server
# connections never together pass the server's max_connections (300) when
# they take turns.
PGBOUNCER_POOL=$((most + 4)) PGBOUNCER_IDLE=2 start_pgbouncer "$work" "$bouncer_port" "plbbench = host=127.0.0.1 port=$port dbname=plbbench user=plbbench password=$password" plbbench

for p in "$proxy_port" "$bouncer_port"; do
    for _ in $(seq 150); do
        "$pgbench" -n -S -c 1 -t 1 -h 127.0.0.1 -p "$p" -U plbbench plbbench >/dev/null 2>&1 && break
        sleep 0.2
    done
    "$pgbench" -n -S -c 1 -t 1 -h 127.0.0.1 -p "$p" -U plbbench plbbench >/dev/null 2>&1 \
        || { cat "$work/proxy.err" >&2; die "nothing answers on port $p"; }
done
bouncer_pid=$(cat "$work/pgbouncer.pid")
[[ $(readlink "/proc/$proxy_pid/exe") == "$(readlink -f "$bin")" ]] || die "pid $proxy_pid is not the proxy"

syscalls_by=none
# The probe counts a command of its own: attached to an idle middleman
# for a moment, perf prints "<not counted>" and the probe would fail.
if perf stat -e raw_syscalls:sys_enter -x, -o "$work/perf.probe" -- sleep 0.1 >/dev/null 2>&1 \
    && grep -q '^[0-9]' "$work/perf.probe"; then
    syscalls_by=perf
elif command -v strace >/dev/null 2>&1; then
    syscalls_by=strace
fi
log "system calls counted by: $syscalls_by"

# switches PID: "voluntary nonvoluntary" context switches so far, summed
# over the process's threads.
switches() {
    cat "/proc/$1"/task/*/status | awk '/^voluntary_ctxt_switches/ {v += $2} /^nonvoluntary_ctxt_switches/ {n += $2} END {print v + 0, n + 0}'
}

# bench PORT N: runs pgbench ($mode: S or S-C); prints "tps transactions".
bench() {
    local out connect=()
    [[ $mode == S-C ]] && connect=(-C)
    out=$(timeout $((secs + 60)) "$pgbench" -n -S "${connect[@]}" -c "$2" -j 2 -T "$secs" -h 127.0.0.1 -p "$1" -U plbbench plbbench 2>&1) \
        || die "pgbench on port $1 with $2 clients failed: $(tail -3 <<<"$out")"
    local tps txns
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | tail -1)
    txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    [[ -n $tps && -n $txns && $txns -gt 0 ]] || die "pgbench on port $1 printed no tps: $out"
    echo "$tps $txns"
}

# measure PID PORT N: "tps cpu_us_per_txn syscalls_per_txn sleeps_per_txn
# preemptions_per_txn user_us_per_txn" for one run.
measure() {
    local pid=$1 before after run tps txns calls= txns_for_calls= v0 n0 v1 n1 u0 u1
    read -r before u0 <<<"$(cpu_ticks "$pid")"
    read -r v0 n0 <<<"$(switches "$pid")"
    if [[ $syscalls_by == perf ]]; then
        perf stat -e raw_syscalls:sys_enter -x, -o "$work/perf.txt" -p "$pid" >/dev/null 2>&1 &
        local perf_pid=$!
        sleep 0.1
        run=$(bench "$2" "$3")
        kill -INT "$perf_pid"
        wait "$perf_pid" 2>/dev/null || true
        calls=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$work/perf.txt")
    else
        run=$(bench "$2" "$3")
    fi
    read -r after u1 <<<"$(cpu_ticks "$pid")"
    read -r v1 n1 <<<"$(switches "$pid")"
    read -r tps txns <<<"$run"
    if [[ $syscalls_by == strace ]]; then
        # A second run under strace, for the calls only.
        timeout $((secs + 30)) strace -c -f -q -p "$pid" -o "$work/strace.txt" >/dev/null 2>&1 &
        local strace_pid=$!
        sleep 0.5
        run=$(bench "$2" "$3")
        kill -INT "$strace_pid" 2>/dev/null || true
        wait "$strace_pid" 2>/dev/null || true
        calls=$(awk '$NF == "total" {print $(NF-2)}' "$work/strace.txt")
        txns_for_calls=${run#* }
    fi
    local cpu_us per_call="not measured"
    cpu_us=$(echo "($after - $before) * 1000000 / $tick / $txns" | bc -l)
    if [[ -n $calls && $calls =~ ^[0-9]+$ ]]; then
        per_call=$(echo "$calls / ${txns_for_calls:-$txns}" | bc -l)
    fi
    echo "$tps $cpu_us $per_call $(echo "($v1 - $v0) / $txns" | bc -l) $(echo "($n1 - $n0) / $txns" | bc -l)" \
        "$(echo "($u1 - $u0) * 1000000 / $tick / $txns" | bc -l)"
}
fmt() { [[ $1 =~ ^[0-9.]+$ ]] && printf "%.${2}f" "$1" || printf '%s' "$1"; }

declare -A pid_of=([plbbench-proxy]=$proxy_pid [pgbouncer]=$bouncer_pid)
declare -A port_of=([plbbench-proxy]=$proxy_port [pgbouncer]=$bouncer_port)
declare -A tps_all=() cpu_all=() user_all=() calls_all=() sleeps_all=() preempt_all=()

# Wake-ups per second with no client: what a middleman's own timers cost.
declare -A idle_wakes=()
for t in plbbench-proxy pgbouncer; do
    read -r v0 _ <<<"$(switches "${pid_of[$t]}")"
    sleep "$idle_secs"
    read -r v1 _ <<<"$(switches "${pid_of[$t]}")"
    idle_wakes[$t]=$(echo "($v1 - $v0) / $idle_secs" | bc -l)
done

# figure NAME UNIT BETTER REPEAT VALUE: one row of FIGURES, when set.
figure() {
    [[ -n ${FIGURES:-} ]] || return 0
    echo "$1,$2,$3,$4,$5,\"bash scripts/proxy-cost.sh $rounds $secs $scale '$n' $idle_secs $mode\"" >>"$FIGURES"
}
echo "| tool | mode | clients | round | tps | CPU us/txn | of it user | syscalls/txn | sleeps/txn | preemptions/txn |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for mode in $modes; do
    for n in $clients_list; do
        for i in $(seq "$rounds"); do
            if (( i % 2 )); then order=(plbbench-proxy pgbouncer); else order=(pgbouncer plbbench-proxy); fi
            declare -A round_cpu=() round_tps=()
            for t in "${order[@]}"; do
                sleep 4  # idle server connections close (server_idle_timeout 2, checked about once a second)
                got=$(measure "${pid_of[$t]}" "${port_of[$t]}" "$n")
                read -r tps cpu calls sleeps preempt user <<<"$got"
                printf '| %s | %s | %d | %d | %.0f | %.2f | %.2f | %s | %.3f | %.3f |\n' "$t" "$mode" "$n" "$i" "$tps" "$cpu" "$user" "$(fmt "$calls" 2)" "$sleeps" "$preempt"
                k=$t,$mode,$n
                user_all[$k]+="$user "
                sleeps_all[$k]+="$sleeps "
                preempt_all[$k]+="$preempt "
                tps_all[$k]+="$tps "
                cpu_all[$k]+="$cpu "
                [[ $calls =~ ^[0-9.]+$ ]] && calls_all[$k]+="$calls "
                round_cpu[$t]=$cpu round_tps[$t]=$tps
            done
            figure "proxy.cpu_ratio.$mode.c$n" ratio lower "$i" "$(printf '%.4f' "$(echo "${round_cpu[plbbench-proxy]} / ${round_cpu[pgbouncer]}" | bc -l)")"
            figure "proxy.tps_ratio.$mode.c$n" ratio higher "$i" "$(printf '%.4f' "$(echo "${round_tps[plbbench-proxy]} / ${round_tps[pgbouncer]}" | bc -l)")"
        done
    done
done
med() { tr ' ' '\n' <<<"${1:-}" | grep . | median; }
ratio() { [[ $1 =~ ^[0-9.]+$ && $2 =~ ^[0-9.]+$ ]] && printf '%.2f' "$(echo "$1 / $2" | bc -l)" || printf 'not measured'; }
echo
echo "| mode | clients | tps (plbbench / PgBouncer) | CPU us/txn plbbench | PgBouncer | ratio | user us/txn plbbench | PgBouncer | syscalls/txn plbbench | PgBouncer | ratio | sleeps/txn plbbench | PgBouncer | preemptions/txn plbbench | PgBouncer |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for mode in $modes; do
    for n in $clients_list; do
        p=plbbench-proxy,$mode,$n b=pgbouncer,$mode,$n
        tp=$(med "${tps_all[$p]}") tb=$(med "${tps_all[$b]}")
        cp=$(med "${cpu_all[$p]}") cb=$(med "${cpu_all[$b]}")
        up=$(med "${user_all[$p]}") ub=$(med "${user_all[$b]}")
        sp=$(med "${calls_all[$p]:-}") sb=$(med "${calls_all[$b]:-}")
        [[ $sp == nan ]] && sp="not measured"
        [[ $sb == nan ]] && sb="not measured"
        wp=$(med "${sleeps_all[$p]}") wb=$(med "${sleeps_all[$b]}")
        xp=$(med "${preempt_all[$p]}") xb=$(med "${preempt_all[$b]}")
        printf '| %s | %d | %.0f / %.0f = %s | %.2f | %.2f | %s | %.2f | %.2f | %s | %s | %s | %.3f | %.3f | %.3f | %.3f |\n' "$mode" "$n" "$tp" "$tb" "$(ratio "$tp" "$tb")" \
            "$cp" "$cb" "$(ratio "$cp" "$cb")" "$up" "$ub" "$(fmt "$sp" 2)" "$(fmt "$sb" 2)" "$(ratio "$sp" "$sb")" "$wp" "$wb" "$xp" "$xb"
    done
done
echo
echo "medians over $rounds rounds of pgbench -n -S (-C in mode S-C) -j 2 -T $secs (scale $scale) per cell; system calls by $syscalls_by;" \
    "$(nproc) cores, 1-min load $(cut -d ' ' -f 1 /proc/loadavg) at the end;" \
    "wake-ups per second with no client (over $idle_secs s): plbbench $(fmt "${idle_wakes[plbbench-proxy]}" 1)," \
    "PgBouncer $(fmt "${idle_wakes[pgbouncer]}" 1)"
