# Sourced by the install scripts of packages whose Debian service must not
# start (prometheus, pgbouncer: plbbench starts its own on free loopback
# ports). `apt_install_no_service WHO PKG...` installs as root with
# policy-rc.d refusing service starts for the duration (an existing
# policy-rc.d is left alone), apt's output in the set-up log
# (lib/quiet.sh).
# shellcheck source=quiet.sh
source "$(dirname "${BASH_SOURCE[0]}")/quiet.sh"
apt_install_no_service() {
    local who=$1; shift
    [[ $(id -u) -eq 0 ]] || { echo "$who: must run as root to install $*" >&2; exit 1; }
    echo "$who: $* will not start its service"
    local policy=/usr/sbin/policy-rc.d made=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        made=1
    fi
    local rc=0
    quiet_apt "$who" "$@" || rc=$?
    [[ $made == 1 ]] && rm -f "$policy"
    return "$rc"
}
