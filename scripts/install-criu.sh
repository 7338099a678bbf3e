#!/usr/bin/env bash
# Provides a CRIU that works on this kernel for ploop-container's checkpoint,
# restore and migrate (see tools/ploop-container/README.md, "CRIU").
#
# Debian 12's criu 3.17 fails `criu check` on Linux >= 6.13 (the vDSO's
# [vvar_vclock] mapping) and cannot dump sockets on >= 6.16; CRIU >= 4.2 is
# needed. Debian unstable carries it, but adding that suite to the host's
# apt sources would pull a newer libc into the host. So CRIU goes into a
# side root made by debootstrap, and a wrapper runs that root's binary
# through that root's own loader and libraries, with the host's kernel,
# /proc and mounts (a chroot would show CRIU an odd mount tree).
#
# Idempotent and fast when done: only the wrapper's `--version` and
# `check` run then. Exits non-zero with one line on stderr when no working
# CRIU >= 4.2 can be had.
set -euo pipefail

ROOT=${PLOOP_CRIU_ROOT:-/var/cache/ploop-container/criu-root}
WRAPPER=${PLOOP_CRIU_WRAPPER:-/usr/local/lib/ploop-container/criu}
SUITE=sid
MIN_MAJOR=4 MIN_MINOR=2

die() { echo "install-criu: $*" >&2; exit 1; }

# "Version: 4.2.1" -> succeeds when >= MIN.
version_ok() {
  local v
  v=$("$1" --version 2>/dev/null | sed -n 's/^Version: *\([0-9][0-9.]*\).*/\1/p' | head -n1)
  [[ -n $v ]] || return 1
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%.*}
  [[ $major =~ ^[0-9]+$ && $minor =~ ^[0-9]+$ ]] || return 1
  ((major > MIN_MAJOR || (major == MIN_MAJOR && minor >= MIN_MINOR)))
}

works() {
  [[ -x $1 ]] && version_ok "$1" && "$1" check 2>&1 | grep -q 'Looks good'
}

write_wrapper() {
  triplet="$(uname -m)-linux-gnu"
  loader=$(ls "$ROOT/usr/lib/$triplet"/ld-linux*.so.[0-9] 2>/dev/null | head -n1)
  [[ -n $loader ]] || return 1
  mkdir -p "$(dirname "$WRAPPER")"
  cat >"$WRAPPER.new" <<EOF
#!/bin/sh
# CRIU from the side root $ROOT (made by install-criu.sh), run with that
# root's loader and libraries on the host's kernel, /proc and mounts.
R=$ROOT
exec "\$R/usr/lib/$triplet/${loader##*/}" \\
  --library-path "\$R/usr/lib/$triplet:\$R/lib/$triplet" \\
  "\$R/usr/sbin/criu" "\$@"
EOF
  chmod 755 "$WRAPPER.new"
  mv "$WRAPPER.new" "$WRAPPER"
}

if works "$WRAPPER"; then
  exit 0
fi
# A side root already made (only the wrapper missing or stale): reuse it.
if [[ -x $ROOT/usr/sbin/criu && $(id -u) -eq 0 ]] && write_wrapper && works "$WRAPPER"; then
  exit 0
fi

[[ $(id -u) -eq 0 ]] || die "need root to provide CRIU >= $MIN_MAJOR.$MIN_MINOR"
command -v debootstrap >/dev/null || die "debootstrap is missing (install-deps.sh installs it)"

source "$(dirname "${BASH_SOURCE[0]}")/host-archive.bash"
MIRROR=$(host_archive | grep -E '^(https?|file):' | head -n1 | cut -d" " -f1 || true)
[[ -n $MIRROR ]] || die "no Debian archive found in the host's apt sources to fetch CRIU >= $MIN_MAJOR.$MIN_MINOR from"

echo "install-criu: building a side root with CRIU from Debian $SUITE in $ROOT"
tmp="$ROOT.new"
rm -rf "$tmp"
mkdir -p "$(dirname "$ROOT")"
if ! debootstrap --variant=minbase --include=criu "$SUITE" "$tmp" "$MIRROR" >"$tmp.log" 2>&1; then
  rm -rf "$tmp"
  die "debootstrap of Debian $SUITE with criu failed (log: $tmp.log)"
fi
rm -f "$tmp.log"
rm -rf "$ROOT"
mv "$tmp" "$ROOT"
write_wrapper || die "no dynamic loader for $(uname -m)-linux-gnu in $ROOT"

version_ok "$WRAPPER" ||
  die "the side root's criu is $("$WRAPPER" --version 2>&1 | sed -n 's/^Version: *//p' | head -n1), older than $MIN_MAJOR.$MIN_MINOR"
out=$("$WRAPPER" check 2>&1) ||
  die "criu check failed: $(printf '%s\n' "$out" | grep -v RLIMIT_NOFILE | tail -n1)"
printf '%s\n' "$out" | grep -q 'Looks good' || die "criu check did not say 'Looks good'"
echo "install-criu: $("$WRAPPER" --version | head -n1) at $WRAPPER"
