# shellcheck shell=bash
# start_pgbouncer WORK PORT DB_LINE USER: writes WORK/pgbouncer.ini (session
# mode on 127.0.0.1:PORT, the one database line DB_LINE, trust for USER),
# then starts Debian's PgBouncer daemonised, as postgres when run as root.
# PGBOUNCER_POOL (default 100) sizes the pool (and admits twice as many
# clients); PGBOUNCER_IDLE (default 600) is server_idle_timeout in seconds.
# Uses the caller's $pgbouncer, as_pg, log and die; the caller stops it
# (WORK/pgbouncer.pid).
start_pgbouncer() {
    local work=$1 listen=$2 db=$3 user=$4
    cat >"$work/pgbouncer.ini" <<CFG
[databases]
$db
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $listen
unix_socket_dir =
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = session
max_client_conn = $((2 * ${PGBOUNCER_POOL:-100}))
default_pool_size = ${PGBOUNCER_POOL:-100}
server_idle_timeout = ${PGBOUNCER_IDLE:-600}
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
CFG
    echo "\"$user\" \"\"" >"$work/userlist.txt"
    chmod 600 "$work/pgbouncer.ini"
    if [[ ${#as_pg[@]} -gt 0 ]]; then chown postgres: "$work" "$work/pgbouncer.ini" "$work/userlist.txt"; fi
    log "$("$pgbouncer" --version | head -1) on 127.0.0.1:$listen, session mode"
    "${as_pg[@]}" "$pgbouncer" -d "$work/pgbouncer.ini" >/dev/null 2>&1 || die "pgbouncer did not start: $(tail -3 "$work/pgbouncer.log")"
}
