#!/usr/bin/env bash
# Installs a Java compiler and Debian's PostgreSQL JDBC driver (pgjdbc) for
# the pgjdbc check in tests/proxy_real.rs: it compiles a small program
# from tests/java/ at test time and connects it through the proxy with
# pgjdbc's default settings (its class arrives late, in SET
# application_name). The test fails when either is missing, unless
# PLBBENCH_JDBC=0 is set.
# Idempotent. PLBBENCH_JDBC=0 skips this script.
set -euo pipefail
if [[ "${PLBBENCH_JDBC:-1}" == 0 ]]; then
    echo "install-jdbc: skipped (PLBBENCH_JDBC=0)"
    exit 0
fi
# shellcheck source=lib/quiet.sh
source "$(dirname "$0")/lib/quiet.sh"
need=()
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
[[ -f /usr/share/java/postgresql.jar ]] || need+=(libpostgresql-jdbc-java)
if [[ ${#need[@]} -eq 0 ]]; then
    echo "install-jdbc: javac and /usr/share/java/postgresql.jar found"
    exit 0
fi
quiet_apt install-jdbc "${need[@]}"
