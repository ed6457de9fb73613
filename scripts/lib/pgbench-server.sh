# Sourced by the scripts that measure plbbench's generator against pgbench
# (bench-vs-pgbench.sh, profile-generator.sh): finds PostgreSQL's server
# binaries and pgbench, builds plbbench, starts one server without a CPU
# quota in a temporary directory (loopback only, trust auth, fsync off,
# max_connections 200, removed on exit, also on INT/TERM) and loads
# `pgbench -i -s $scale`. Expects `name` (for messages) and `scale`; sets
# `bin`, `pgbench`, `port`, `work` and PGHOST/PGPORT/PGUSER/PGDATABASE.

die() { printf '%s: error: %s\n' "$name" "$*" >&2; exit 1; }
log() { printf '%s: %s\n' "$name" "$*" >&2; }

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

work=$(mktemp -d "/tmp/plbbench-$name.XXXXXX")
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

# The same query for both tools: pgbench -S's SELECT on a random aid. The
# command runs under the caller's `timer` array when set (e.g. GNU time).
timer=()
plbbench_select() {
    "${timer[@]}" "$bin" bench --dsn "host=127.0.0.1 port=$port user=postgres dbname=postgres" \
        --query 'SELECT abalance FROM pgbench_accounts WHERE aid = $1' --key-range $((100000 * scale)) "$@"
}
