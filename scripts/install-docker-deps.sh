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
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq debootstrap >/dev/null
echo "install-docker-deps: debootstrap installed"
