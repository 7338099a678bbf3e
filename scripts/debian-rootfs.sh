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

# "URI SUITE" of the first Debian archive in the host's apt sources:
# deb822 .sources first, then the one-line format.
host_archive() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
         {
           uri = ""; suite = ""; types = ""
           for (i = 1; i <= NF; i++) {
             if ($i ~ /^URIs:/)   { uri = $i;   sub(/^URIs:[ \t]*/, "", uri);   sub(/[ \t].*/, "", uri) }
             if ($i ~ /^Suites:/) { suite = $i; sub(/^Suites:[ \t]*/, "", suite); sub(/[ \t].*/, "", suite) }
             if ($i ~ /^Types:/)  { types = $i }
           }
           if (uri != "" && suite != "" && types ~ /deb([ \t]|$)/ && suite !~ /security/ && uri !~ /security/) {
             print uri, suite; exit
           }
         }' "$f"
  done
  local l
  for l in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $l ]] || continue
    awk '$1 == "deb" {
           i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
           if ($i !~ /security/ && $(i + 1) !~ /security/) { print $i, $(i + 1); exit }
         }' "$l"
  done
}
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
