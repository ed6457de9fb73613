#!/usr/bin/env bash
# The pgbench cross-check of `plbbench calibrate` (docs/measurement.md, "Calibration"): an independent
# client measures the same costs on the same kind of replica. Brings up one
# local replica of the default dataset under a C-core quota with `plbbench
# cluster up` (in a private state directory, taken down on exit), then with
# pgbench (prepared protocol, -j 2) drives each workload template as a custom
# script with a random key at CONNECTIONS connections for SECONDS, and
# measures connection set-up with `pgbench -C` (a new connection per
# `SELECT 1`). For each it prints pgbench's rate and the replica's cgroup CPU
# per transaction (`plbbench cluster cpu r1` before and after), the figures
# to set beside workloads/calibration-local.toml.
#
# Usage: scripts/calibrate-pgbench.sh [CONNECTIONS (4)] [SECONDS (10)] [C (0.3)]
set -euo pipefail
cd "$(dirname "$0")/.."
conns=${1:-4}
secs=${2:-10}
cpus=${3:-0.3}

die() { printf 'calibrate-pgbench: error: %s\n' "$*" >&2; exit 1; }
log() { printf 'calibrate-pgbench: %s\n' "$*" >&2; }
pgbench=$(command -v pgbench || true)
[[ -n "$pgbench" ]] || pgbench=$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1)
[[ -x "$pgbench" ]] || die "pgbench not found: run scripts/install-postgres.sh"

cargo build --release --locked -q
bin=$PWD/target/release/plbbench
work=$(mktemp -d /tmp/plbbench-calibrate-pgbench.XXXXXX)
chmod 755 "$work" # the servers run as an unprivileged user
export PLBBENCH_STATE_DIR=$work/local
cleanup() {
    "$bin" cluster down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "one replica at $cpus cores"
dsn=$("$bin" cluster up --replicas 1 --cpus "$cpus" | head -1)
[[ -n "$dsn" ]] || die "cluster up printed no DSN"

# The workload's templates with `$1` as a pgbench variable.
cat >"$work/p.sql" <<'SQL'
\set k random(1, 74800)
SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice),
       sum(l_extendedprice * (1 - l_discount)),
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)),
       avg(l_quantity), avg(l_extendedprice), avg(l_discount), count(*)
FROM lineitem
WHERE l_orderkey >= :k AND l_orderkey < :k + 200
GROUP BY l_returnflag, l_linestatus
ORDER BY l_returnflag, l_linestatus;
SQL
cat >"$work/f.sql" <<'SQL'
\set k random(1, 74500)
SELECT o.o_orderpriority, count(DISTINCT o.o_orderkey),
       sum(l.l_extendedprice * (1 - l.l_discount)) AS revenue
FROM orders o JOIN lineitem l ON l.l_orderkey = o.o_orderkey
WHERE o.o_orderkey >= :k AND o.o_orderkey < :k + 500
GROUP BY o.o_orderpriority
ORDER BY revenue DESC;
SQL
echo 'SELECT 1;' >"$work/connect.sql"

# One measurement: pgbench's transactions and rate, and r1's CPU per transaction.
measure() {
    local name=$1; shift
    local c0 c1 out tx tps
    c0=$("$bin" cluster cpu r1)
    out=$("$pgbench" "$dsn" -n "$@" -T "$secs" 2>&1) || die "pgbench ($name): $out"
    c1=$("$bin" cluster cpu r1)
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
    [[ -n "$tx" && "$tx" -gt 0 ]] || die "pgbench ($name) processed nothing: $out"
    printf '| %s | %s | %.1f | %.2f |\n' "$name" "$*" "$tps" "$(echo "($c1 - $c0) * 1000 / $tx" | bc -l)"
}

echo "| measurement | pgbench flags | tps | replica CPU ms per transaction |"
echo "| --- | --- | --- | --- |"
measure p_pricing_summary -M prepared -c "$conns" -j 2 -f "$work/p.sql"
measure f_order_revenue -M prepared -c "$conns" -j 2 -f "$work/f.sql"
measure "connection set-up" -C -c 1 -j 1 -f "$work/connect.sql"
log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
