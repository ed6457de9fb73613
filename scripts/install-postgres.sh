#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries (initdb, postgres), pgbench and psql are
# installed, for plbbench's `local` cluster backend. Idempotent: does nothing
# when everything is already there. Run as root on a Debian-like system; it
# uses Debian's own packages through apt-get and the sources apt already has.
set -euo pipefail

log() { printf 'install-postgres: %s\n' "$*"; }
# shellcheck source=lib/quiet.sh
source "$(dirname "$0")/lib/quiet.sh"
die() { printf 'install-postgres: error: %s\n' "$*" >&2; exit 1; }

# /usr/lib/postgresql/*/bin (Debian's layout), newest version first.
debian_bindirs() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [[ -d "$d" ]] && printf '%s\n' "$d"
    done | sort -V -r
}

# Prints the directory holding both initdb and postgres, if any (the same
# lookup as src/cluster/local/pgbin.rs: PLBBENCH_PG_BIN, then PATH, then the newest
# /usr/lib/postgresql/*/bin).
find_bindir() {
    local d cand
    if [[ -n "${PLBBENCH_PG_BIN:-}" && -x "$PLBBENCH_PG_BIN/initdb" && -x "$PLBBENCH_PG_BIN/postgres" ]]; then
        echo "$PLBBENCH_PG_BIN"; return 0
    fi
    if cand=$(command -v initdb 2>/dev/null); then
        d=$(dirname "$(readlink -f "$cand")")
        if [[ -x "$d/postgres" ]]; then echo "$d"; return 0; fi
    fi
    for d in $(debian_bindirs); do
        if [[ -x "$d/initdb" && -x "$d/postgres" ]]; then echo "$d"; return 0; fi
    done
    return 1
}

find_pgbench() {
    local d
    if command -v pgbench >/dev/null 2>&1; then command -v pgbench; return 0; fi
    if d=$(find_bindir) && [[ -x "$d/pgbench" ]]; then echo "$d/pgbench"; return 0; fi
    for d in $(debian_bindirs); do
        if [[ -x "$d/pgbench" ]]; then echo "$d/pgbench"; return 0; fi
    done
    return 1
}

apt_updated=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install PostgreSQL (server and pgbench) by hand, or set PLBBENCH_PG_BIN to its bin directory"
    [[ $(id -u) -eq 0 ]] || die "must run as root to install packages (try: sudo $0)"
    if [[ $apt_updated -eq 0 ]]; then
        quiet_apt_update install-postgres || exit 1
        apt_updated=1
    fi
    quiet_step install-postgres "installing Debian's $*" \
        env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" || exit 1
}

# Debian's postgresql package creates a 'main' cluster on port 5432 and may
# start it. plbbench runs its own servers, so stop the package's (data kept).
stop_package_clusters() {
    command -v pg_lsclusters >/dev/null 2>&1 || return 0
    local ver name port status
    while read -r ver name port status _; do
        if [[ "$status" == online* ]]; then
            log "stopping the package's cluster $ver/$name on port $port (plbbench starts its own servers)"
            pg_ctlcluster "$ver" "$name" stop || log "could not stop cluster $ver/$name; it keeps running"
        fi
    done < <(pg_lsclusters --no-header 2>/dev/null || true)
}

did=()
if bindir=$(find_bindir); then
    log "PostgreSQL server binaries found in $bindir"
else
    apt_install postgresql
    did+=("installed postgresql")
    stop_package_clusters
    bindir=$(find_bindir) || die "postgresql installed but initdb/postgres still not found under /usr/lib/postgresql/*/bin"
    log "PostgreSQL server binaries now in $bindir"
fi

if pgb=$(find_pgbench); then
    log "pgbench found at $pgb"
else
    # pgbench ships in the server package on some Debian releases and in the
    # client or contrib package on others: install whichever exists.
    for pkg in postgresql-client postgresql-contrib; do
        if apt-cache show "$pkg" >/dev/null 2>&1; then
            apt_install "$pkg"
            did+=("installed $pkg")
            if pgb=$(find_pgbench); then break; fi
        fi
    done
    pgb=$(find_pgbench) || die "pgbench not found after installing postgresql-client/postgresql-contrib"
    log "pgbench now at $pgb"
fi

# psql: the proxy's tests log in with it (tests/proxy_real.rs).
if command -v psql >/dev/null 2>&1; then
    log "psql found at $(command -v psql)"
else
    apt_install postgresql-client
    did+=("installed postgresql-client")
    command -v psql >/dev/null 2>&1 || die "psql not found after installing postgresql-client"
fi

version=$("$bindir/postgres" --version) || die "$bindir/postgres does not run"
log "server: $version"
if [[ ${#did[@]} -eq 0 ]]; then
    log "nothing to do"
else
    log "done: ${did[*]}"
fi
