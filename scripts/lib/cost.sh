# shellcheck shell=bash
# Helpers of the cost scripts (scripts/proxy-cost.sh, scripts/tier-cost.sh):
# a process's CPU from /proc, medians, free loopback ports.

# free_port: a free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# cpu_ticks PID: "user+system user" clock ticks of the whole process so far.
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13, $12 }' "/proc/$1/stat"; }

# median: the median of the numbers on stdin, one per line ("nan": none).
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# cost_tools: finds plbbench ($bin, or PLBBENCH_BIN), pgbench, pgbouncer and
# the clock tick; makes $work (/tmp/plbbench-$name.*, with a private
# PLBBENCH_STATE_DIR in it) and as_pg (PgBouncer runs as postgres when this
# runs as root: it refuses root). Uses the caller's $name and die.
cost_tools() {
    bin=${PLBBENCH_BIN:-$PWD/target/release/plbbench}
    [[ -x $bin ]] || die "$bin not found: cargo build --release (or set PLBBENCH_BIN)"
    pgbench=$(command -v pgbench || ls -d /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1 || true)
    [[ -n $pgbench && -x $pgbench ]] || die "pgbench not found: run scripts/install-postgres.sh"
    pgbouncer=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
    [[ -x $pgbouncer ]] || die "pgbouncer not found: run scripts/install-pgbouncer.sh"
    tick=$(getconf CLK_TCK)
    work=$(mktemp -d "/tmp/plbbench-$name.XXXXXX")
    chmod 755 "$work"
    export PLBBENCH_STATE_DIR=$work/state
    as_pg=()
    if [[ $(id -u) -eq 0 ]]; then
        id postgres >/dev/null 2>&1 || die "running as root but there is no postgres user to run PgBouncer"
        as_pg=(runuser -u postgres --)
    fi
}

# cost_cluster SCALE: a one-replica `plbbench cluster up` in $work, loaded
# with `pgbench -i -s SCALE`; sets $port and $password. Uses log and die.
cost_cluster() {
    log "plbbench cluster up --replicas 1"
    "$bin" cluster up --replicas 1 >"$work/cluster.out" 2>"$work/cluster.err" || { cat "$work/cluster.err" >&2; die "cluster up failed"; }
    local dsn
    dsn=$(grep -m1 '^host=' "$work/cluster.out") || die "cluster up printed no DSN: $(cat "$work/cluster.out")"
    port=$(sed -n 's/.* port=\([0-9]*\).*/\1/p' <<<"$dsn")
    password=$(sed -n 's/.* password=\([^ ]*\).*/\1/p' <<<"$dsn")
    log "pgbench -i -s $1 on r1 (127.0.0.1:$port)"
    PGPASSWORD=$password "$pgbench" -i -q -s "$1" -h 127.0.0.1 -p "$port" -U plbbench plbbench >"$work/init.log" 2>&1 \
        || { cat "$work/init.log" >&2; die "pgbench -i failed"; }
}
