#!/usr/bin/env bash
# Installs every Debian package the build, tests, demo and benchmarks need.
# Idempotent: does nothing when all are present. Needs root (apt-get).
set -euo pipefail
# nbdfuse comes with libnbd-bin on Debian 12.
pkgs=(
  build-essential pkg-config
  libaio-dev zlib1g-dev libxxhash-dev libblkid-dev libext2fs-dev libxml2-dev uuid-dev
  libcriterion-dev libfuse3-dev fuse3 libnbd-dev liburing-dev
  qemu-utils libnbd-bin nbdkit fio e2fsprogs xfsprogs util-linux
  busybox-static runc bubblewrap iproute2 python3 kmod
  debootstrap
  libseccomp-dev
  clang-14 libclang-rt-14-dev
  libgnutls28-dev gnutls-bin
  nettle-dev
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# CRIU >= 4.2 in a side root (Debian 12's 3.17 fails on this kernel); fast when done.
install_criu() { "$(dirname "${BASH_SOURCE[0]}")/install-criu.sh"; }
if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# OpenVZ's own ploop tools (Debian's `ploop` + `libploop1`, 1.15), as a
# peer: their `ploop check` runs offline on any kernel. Unpacked beside
# ours under /opt/openvz-ploop, never installed over our `ploop`; run
# through /opt/openvz-ploop/ploop, which finds the library it came with.
OVZ=/opt/openvz-ploop
if [[ ! -x $OVZ/ploop ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to unpack OpenVZ's ploop into $OVZ" >&2
    exit 1
  fi
  tmp=$(mktemp -d)
  chmod 755 "$tmp" # apt-get download runs as _apt where it can
  if ! (cd "$tmp" && apt-get download ploop libploop1 >/dev/null 2>&1); then
    apt-get update -qq
    (cd "$tmp" && apt-get download ploop libploop1 >/dev/null 2>&1)
  fi
  mkdir -p "$OVZ/root"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$OVZ/root"; done
  rm -rf "$tmp"
  cat >"$OVZ/ploop" <<'WRAP'
#!/bin/sh
# OpenVZ's ploop (Debian package ploop 1.15), with the libploop it came with.
d=$(dirname "$0")/root
LD_LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu:$d/usr/lib exec "$d/usr/sbin/ploop" "$@"
WRAP
  chmod 755 "$OVZ/ploop"
  echo "install-deps: OpenVZ's ploop unpacked into $OVZ"
fi
install_criu
