#!/usr/bin/env bash
# Installs Debian's Prometheus server (the metrics check in
# tests/live_metrics.rs scrapes a real run with it) when no prometheus
# binary is on PATH. The package's own service is kept from starting: the
# test starts its own server on a free loopback port and stops it.
# Idempotent.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
    echo "install-prometheus: prometheus found at $(command -v prometheus)"
    exit 0
fi
# shellcheck source=lib/apt-no-service.sh
source "$(dirname "$0")/lib/apt-no-service.sh"
apt_install_no_service install-prometheus prometheus
