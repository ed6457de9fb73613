#!/usr/bin/env bash
# Builds the root filesystem of plbbench's PostgreSQL image into DIR:
# a minimal Debian bookworm (debootstrap --variant=minbase) with
# postgresql-15 from Debian packages. No image registry is used; the Debian
# mirror is read from this machine's apt sources at run time (or
# $PLBBENCH_DEBIAN_MIRROR) and never written into the repository.
#
# Usage: build-rootfs.sh DIR     (as root; `plbbench image build` calls it)
set -euo pipefail
dir=${1:?usage: build-rootfs.sh DIR}
suite=bookworm

mirror() {
    if [[ -n ${PLBBENCH_DEBIAN_MIRROR:-} ]]; then
        echo "$PLBBENCH_DEBIAN_MIRROR"; return
    fi
    local f uri
    # deb822 sources: the first URIs line of a stanza whose suites include $suite.
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        uri=$(awk -v s="$suite" '
            /^[[:space:]]*$/ { if (u != "" && ok) { print u; exit } u=""; ok=0; next }
            /^URIs:/ { u=$2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) ok=1 }
            END { if (u != "" && ok) print u }' "$f" | head -n1)
        if [[ -n $uri ]]; then echo "$uri"; return; fi
    done
    # One-line sources: "deb [opts] URI bookworm main".
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $f ]] || continue
        uri=$(awk -v s="$suite" '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) == s) { print $i; exit } }' "$f")
        if [[ -n $uri ]]; then echo "$uri"; return; fi
    done
    echo "build-rootfs: no Debian $suite source found in /etc/apt (set PLBBENCH_DEBIAN_MIRROR)" >&2
    exit 1
}

[[ $(id -u) == 0 ]] || { echo "build-rootfs: must run as root (debootstrap)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "build-rootfs: debootstrap missing: run scripts/install-docker-deps.sh" >&2; exit 1; }
url=$(mirror)
rm -rf "$dir"
mkdir -p "$dir"
debootstrap --variant=minbase --include=postgresql-15,ca-certificates "$suite" "$dir" "$url" >"$dir.debootstrap.log" 2>&1 || {
    echo "build-rootfs: debootstrap failed; last lines of $dir.debootstrap.log:" >&2
    tail -n 20 "$dir.debootstrap.log" >&2
    exit 1
}
rm -f "$dir.debootstrap.log"
# The image runs the server itself; Debian's default cluster is not used.
chroot "$dir" pg_dropcluster 15 main 2>/dev/null || true
# Slim it: no apt lists, caches, docs or manuals in the image, and no JIT
# (plbbench runs with jit = off; LLVM alone is over 100 MB).
rm -f "$dir"/usr/lib/x86_64-linux-gnu/libLLVM-*.so* "$dir"/usr/lib/postgresql/15/lib/llvmjit*
rm -rf "$dir"/usr/lib/postgresql/15/lib/bitcode
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
mkdir -p "$dir/var/lib/plbbench" "$dir/run/postgresql"
chroot "$dir" chown postgres:postgres /var/lib/plbbench /run/postgresql
chmod 0700 "$dir/var/lib/plbbench"
# Does the server start? (version check inside the root filesystem)
chroot "$dir" /usr/lib/postgresql/15/bin/postgres --version
