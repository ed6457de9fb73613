#!/usr/bin/env bash
# Installs the Python PostgreSQL drivers for the proxy's Python check in
# tests/proxy_real.rs (python_clients_through_the_proxy, which runs
# tests/python/clients.py through `plbbench proxy`): a virtual environment
# at target/pyclients with psycopg 3 (binary wheel, its own libpq),
# psycopg-pool and asyncpg, pinned below, from PyPI. The test fails when
# the environment is missing, unless PLBBENCH_PYCLIENTS=0 is set.
# Idempotent: an environment that already has these versions is kept
# (`cargo clean` removes it with target/; run this again after one).
# PLBBENCH_PYCLIENTS=0 skips this script.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${PLBBENCH_PYCLIENTS:-1}" == 0 ]]; then
    echo "install-pyclients: skipped (PLBBENCH_PYCLIENTS=0)"
    exit 0
fi
# shellcheck source=lib/quiet.sh
source scripts/lib/quiet.sh
PINS=("psycopg[binary]==3.3.9" "psycopg-pool==3.3.3" "asyncpg==0.32.0")
VENV=target/pyclients
PY=${PLBBENCH_PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "install-pyclients: $PY not found: install python3 and python3-venv" >&2; exit 1; }
if [[ -x $VENV/bin/python ]] && [[ "$("$VENV/bin/python" -c 'import psycopg, psycopg_pool, asyncpg; print(psycopg.__version__, psycopg_pool.__version__, asyncpg.__version__)' 2>/dev/null)" == "3.3.9 3.3.3 0.32.0" ]]; then
    echo "install-pyclients: $VENV has psycopg 3.3.9, psycopg-pool 3.3.3, asyncpg 0.32.0"
    exit 0
fi
if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    # Debian's python3 has venv's pip bootstrap in a package of its own.
    command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]] \
        || { echo "install-pyclients: $PY cannot make a virtual environment: install python3-venv" >&2; exit 1; }
    quiet_apt install-pyclients python3-venv
fi
quiet_step install-pyclients "creating $VENV ($("$PY" --version 2>&1))" "$PY" -m venv --clear "$VENV"
quiet_step install-pyclients "installing ${PINS[*]} from PyPI (log: $QUIET_LOG)" \
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-cache-dir "${PINS[@]}"
echo "install-pyclients: $("$VENV/bin/python" -c 'import psycopg, asyncpg; print("psycopg", psycopg.__version__, "libpq", psycopg.pq.version(), "asyncpg", asyncpg.__version__)')"
