#!/usr/bin/env bash
# Installs what the docker cluster backend needs to build its image on this
# machine: debootstrap (docker/build-rootfs.sh builds the PostgreSQL root
# filesystem from Debian packages). Idempotent; Debian only; needs root.
set -euo pipefail
if command -v debootstrap >/dev/null 2>&1; then
    exit 0
fi
if [[ $(id -u) != 0 ]]; then
    echo "install-docker-deps: debootstrap is missing and this is not root; run as root" >&2
    exit 1
fi
# shellcheck source=lib/quiet.sh
source "$(dirname "$0")/lib/quiet.sh"
quiet_apt install-docker-deps debootstrap
echo "install-docker-deps: debootstrap installed"
