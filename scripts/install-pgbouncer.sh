#!/usr/bin/env bash
# Installs Debian's PgBouncer (scripts/bench-proxy.sh measures it in session
# mode beside `plbbench proxy`, as the reference pooler) when no pgbouncer
# binary is found. The package's own service is kept from starting: the
# benchmark starts its own on a free loopback port and stops it. Idempotent.
set -euo pipefail
if command -v pgbouncer >/dev/null 2>&1 || [[ -x /usr/sbin/pgbouncer ]]; then
    echo "install-pgbouncer: pgbouncer found"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || { echo "install-pgbouncer: must run as root to install pgbouncer" >&2; exit 1; }
echo "install-pgbouncer: installing Debian's pgbouncer package (its service not started)"
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    made_policy=1
fi
trap 'if [[ $made_policy == 1 ]]; then rm -f "$policy"; fi' EXIT
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends pgbouncer
echo "install-pgbouncer: $(/usr/sbin/pgbouncer --version | head -1)"
