#!/usr/bin/env bash
# Builds a Debian minbase rootfs tarball with debootstrap, once, for tests
# (tests/integration/container-debian.sh): OUT is kept as a cache, so later
# runs take seconds instead of minutes. The archive and suite are the ones
# the host's own apt sources use (never the security archive); nothing is
# hard-coded.
#   scripts/debian-rootfs.sh OUT.tar.gz [PACKAGE,...]
set -euo pipefail
die() { echo "debian-rootfs: $*" >&2; exit 1; }
[[ $# -ge 1 ]] || die "usage: $0 OUT.tar.gz [PACKAGE,...]"
OUT=$1 INCLUDE=${2:-}
[[ -s $OUT ]] && exit 0
[[ $(id -u) -eq 0 ]] || die "need root"
command -v debootstrap >/dev/null || die "debootstrap is missing (install-deps.sh installs it)"

source "$(dirname "${BASH_SOURCE[0]}")/host-archive.bash"
read -r MIRROR SUITE < <(host_archive | grep -E '^(https?|file):' | head -n1) ||
  die "no Debian archive in the host's apt sources"
[[ -n ${MIRROR:-} && -n ${SUITE:-} ]] || die "no Debian archive in the host's apt sources"
# A suite name like "bookworm-updates" is not a debootstrap suite.
SUITE=${SUITE%%-*}

mkdir -p "$(dirname "$OUT")"
tmp=$(mktemp -d "$(dirname "$OUT")/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "debian-rootfs: debootstrap $SUITE minbase${INCLUDE:+ +$INCLUDE} from $MIRROR (a few minutes, once)" >&2
if ! debootstrap --variant=minbase ${INCLUDE:+--include="$INCLUDE"} "$SUITE" "$tmp/root" "$MIRROR" \
    >"$tmp/log" 2>&1; then
  tail -n 5 "$tmp/log" >&2
  die "debootstrap failed"
fi
# No package lists or caches, no device nodes (the launcher makes /dev).
rm -rf "$tmp"/root/var/cache/apt/archives/*.deb "$tmp"/root/var/lib/apt/lists/* "$tmp"/root/dev/*
tar -C "$tmp/root" --numeric-owner -czf "$tmp/out.tar.gz" .
mv "$tmp/out.tar.gz" "$OUT"
echo "debian-rootfs: $OUT ($(du -h "$OUT" | cut -f1))" >&2
