#!/usr/bin/env bash
# Installs Debian's headless Chromium (used by the report browser check)
# when no chromium binary is on PATH. Idempotent.
set -euo pipefail
for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then
        echo "install-chromium: $b found at $(command -v "$b")"
        exit 0
    fi
done
[[ $(id -u) -eq 0 ]] || { echo "install-chromium: must run as root to install chromium" >&2; exit 1; }
echo "install-chromium: installing Debian's chromium package"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
