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
[[ $(id -u) -eq 0 ]] || { echo "install-prometheus: must run as root to install prometheus" >&2; exit 1; }
echo "install-prometheus: installing Debian's prometheus package (its service not started)"
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    made_policy=1
fi
trap 'if [[ $made_policy == 1 ]]; then rm -f "$policy"; fi' EXIT
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
