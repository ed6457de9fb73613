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
# shellcheck source=lib/quiet.sh
source "$(dirname "$0")/lib/quiet.sh"
quiet_apt install-chromium chromium fonts-dejavu-core
