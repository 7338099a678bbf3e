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
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# CRIU >= 4.2 in a side root (Debian 12's 3.17 fails on this kernel); fast when done.
install_criu() { "$(dirname "${BASH_SOURCE[0]}")/install-criu.sh"; }
if ((${#missing[@]} == 0)); then
  install_criu
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_criu
