# Sourced by the install scripts and setup.sh so that a fresh machine's
# set-up prints one line per step, not apt's or cargo's hundreds: each
# step's output goes to one log file (target/setup.log, or
# $PLBBENCH_SETUP_LOG), and a failed step prints the log's last lines and
# its path on stderr.
#
# `quiet_step WHO WHAT CMD...` prints `WHO: WHAT`, runs CMD with its output
# appended to the log, and returns CMD's status (after the log's tail when
# it failed).
QUIET_LOG=${PLBBENCH_SETUP_LOG:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/target/setup.log}
mkdir -p "$(dirname "$QUIET_LOG")"

quiet_step() {
    local who=$1 what=$2 rc=0
    shift 2
    printf '%s: %s\n' "$who" "$what"
    printf '\n== %s %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$who" "$*" >>"$QUIET_LOG"
    "$@" </dev/null >>"$QUIET_LOG" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]]; then
        {
            printf '%s: failed (exit %s): %s; the last lines of %s:\n' "$who" "$rc" "$*" "$QUIET_LOG"
            tail -n 15 "$QUIET_LOG" | sed 's/^/    /'
        } >&2
    fi
    return "$rc"
}

# `quiet_apt_update WHO`: apt-get update, once per set-up: setup.sh names
# a stamp file in $PLBBENCH_APT_ONCE that the first successful update
# creates, so the install scripts it runs share one update; a script run
# on its own updates every time.
quiet_apt_update() {
    local who=$1
    [[ -n "${PLBBENCH_APT_ONCE:-}" && -e "$PLBBENCH_APT_ONCE" ]] && return 0
    quiet_step "$who" "apt-get update (log: $QUIET_LOG)" apt-get update || return
    [[ -z "${PLBBENCH_APT_ONCE:-}" ]] || : >"$PLBBENCH_APT_ONCE"
}

# `quiet_apt WHO PKG...`: apt-get update (once per set-up), then install
# PKG without recommends, each a quiet step.
quiet_apt() {
    local who=$1
    shift
    quiet_apt_update "$who" || return
    quiet_step "$who" "installing Debian's $*" \
        env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}
