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
# shellcheck source=lib/apt-no-service.sh
source "$(dirname "$0")/lib/apt-no-service.sh"
apt_install_no_service install-pgbouncer pgbouncer
echo "install-pgbouncer: $(/usr/sbin/pgbouncer --version | head -1)"
