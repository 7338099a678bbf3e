#!/usr/bin/env bash
# Local attach benchmark: fio inside ext4 on our kmod-free path (ploop-nbd's
# FUSE file + loop with direct I/O), next to ext4 on a raw file attached with
# `losetup --direct-io=on` (the ceiling), and next to the peer kmod-free path
# `nbdkit file` + nbdfuse + loop.  Random 4k 70/30 at QD32 and sequential
# 1 MiB writes and reads, O_DIRECT libaio on a file in the mounted fs.
# Prints IOPS/bandwidth side by side and ratios to the direct-I/O loop.
#   env: RUNTIME (s per job, default 10), ROUNDS (default 2), SIZE (fio file, default 1G),
#   BENCH_DIR (where the images live, default /var/tmp; /dev/shm takes the shared disk's
#   noise out and shows what each path costs in CPU; "ram" puts them on ext4 on a
#   tmpfs-backed loop device with direct I/O: a quiet, fast disk with the same
#   filesystem and the same O_DIRECT/io_uring paths as /var/tmp, which tmpfs lacks)
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
PLOOP=$BUILD/bin/ploop
export PLOOP_NBD=$BUILD/bin/ploop-nbd
RUNTIME=${RUNTIME:-10}
ROUNDS=${ROUNDS:-2}
SIZE=${SIZE:-1G}
DISK=4G
for t in fio nbdkit nbdfuse losetup mkfs.ext4 python3; do
  command -v $t >/dev/null || { echo "mount bench: $t not installed, skipped"; exit 0; }
done
[[ $(id -u) -eq 0 && -c /dev/fuse ]] || { echo "mount bench: needs root and /dev/fuse, skipped"; exit 0; }
[[ -x $PLOOP && -x $PLOOP_NBD ]] || { echo "mount bench: build first (make all)"; exit 1; }

source "$(dirname "$0")/common.sh"
at_exit() {
  bench_cleanup
  rm -rf "$W"
}
trap at_exit EXIT
W=
if [[ ${BENCH_DIR:-} == ram ]]; then
  bench_ram_dir 8 || { echo "mount bench (ram): skipped"; exit 0; }
  BENCH_DIR=$RAM_DIR
fi
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ploop-bench-mount.XXXXXX")

"$PLOOP" mount --help >/dev/null 2>&1 || { echo "mount bench: ploop has no mount verb"; exit 1; }
att_mount() { "$PLOOP" mount -m "$2" "$1" >/dev/null; }
att_umount() { "$PLOOP" umount "$1"; }
att_format() { "$PLOOP" init -s "$DISK" -t ext4 "$1/root.hds" >/dev/null; }

# fio_job NAME DIR ARGS...: prints "IOPS BW_MiB/s" (read+write summed).
fio_job() {
  local name=$1 dir=$2
  shift 2
  fio --name="$name" --filename="$dir/fio.dat" --size="$SIZE" --direct=1 --ioengine=libaio \
    --runtime="$RUNTIME" --time_based --ramp_time=1 --group_reporting --output-format=json "$@" \
    >"$W/$name.json" 2>/dev/null
  python3 - "$W/$name.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
iops = j["read"]["iops"] + j["write"]["iops"]
bw = (j["read"]["bw_bytes"] + j["write"]["bw_bytes"]) / 1048576
print(f"{iops:.0f} {bw:.0f}")
EOF
}

layout() {
  # Lay the file out first so every job measures overwrites, not allocation.
  fio --name=layout --filename="$1/fio.dat" --size="$SIZE" --rw=write --bs=1M --direct=1 \
    --ioengine=libaio --iodepth=8 >/dev/null 2>&1
}

echo "mount bench: ext4 on each path, images in ${BENCH_DIR:-/var/tmp}${RAM_DIR:+ (ext4 on a tmpfs-backed loop device)}, fio file $SIZE, ${RUNTIME}s per job, best of $ROUNDS interleaved rounds ($(nproc) cores)"

# 1. Raw file + loop with direct I/O: the ceiling.
mkdir -p "$W/raw.mnt"
truncate -s $DISK "$W/raw.img"
ldev=$(losetup -f --show --direct-io=on "$W/raw.img")
undo+=("losetup -d $ldev")
mkfs.ext4 -q -F -E nodiscard "$ldev"
mount "$ldev" "$W/raw.mnt"
undo+=("umount $W/raw.mnt")

# 2. Ours: ploop-nbd FUSE file + loop with direct I/O.
mkdir -p "$W/ploop" "$W/ploop.mnt"
att_format "$W/ploop"
att_mount "$W/ploop" "$W/ploop.mnt"
undo+=("att_umount $W/ploop")
# Which FUSE transport the daemon serves with (its threads are named after it).
transport=/dev/fuse
for p in $(pgrep -f "ploop-nbd .*$W/ploop\$" || true); do
  grep -qx ploop-fuse-ring /proc/"$p"/task/*/comm 2>/dev/null && transport=io_uring
done

# 3. Peer: nbdkit file plugin + nbdfuse + loop with direct I/O.
mkdir -p "$W/nbdfuse" "$W/peer.mnt"
truncate -s $DISK "$W/peer.img"
nbdkit -U "$W/nbdkit.sock" -P "$W/nbdkit.pid" -f file "$W/peer.img" cache=none &
undo+=("kill \$(cat $W/nbdkit.pid)")
for _ in $(seq 100); do [[ -S $W/nbdkit.sock ]] && break; sleep 0.05; done
nbdfuse "$W/nbdfuse" --unix "$W/nbdkit.sock" &
undo+=("fusermount3 -u $W/nbdfuse")
for _ in $(seq 100); do [[ -f $W/nbdfuse/nbd ]] && break; sleep 0.05; done
pdev=$(losetup -f --show --direct-io=on "$W/nbdfuse/nbd")
undo+=("losetup -d $pdev")
mkfs.ext4 -q -F -E nodiscard "$pdev"
mount "$pdev" "$W/peer.mnt"
undo+=("umount $W/peer.mnt")

declare -A DIRS=([loop-dio]=$W/raw.mnt [ploop]=$W/ploop.mnt [nbdkit+nbdfuse]=$W/peer.mnt)
TAGS=(loop-dio ploop nbdkit+nbdfuse)
for t in "${TAGS[@]}"; do layout "${DIRS[$t]}"; done

# The three paths take turns on every job and round, so a burst of load on
# this shared host hits them alike; each keeps its best round.
declare -A R
best() { # best OLD NEW FIELD: the result line with the larger FIELD
  if [[ -z $1 ]] || (($(cut -d' ' -f"$3" <<<"$2") > $(cut -d' ' -f"$3" <<<"$1"))); then echo "$2"; else echo "$1"; fi
}
for ((round = 1; round <= ROUNDS; round++)); do
  for t in "${TAGS[@]}"; do
    d=${DIRS[$t]}
    R[$t,rand]=$(best "${R[$t,rand]:-}" "$(fio_job rand "$d" --rw=randrw --rwmixread=70 --bs=4k --iodepth=32)" 1)
    R[$t,seqw]=$(best "${R[$t,seqw]:-}" "$(fio_job seqw "$d" --rw=write --bs=1M --iodepth=8)" 2)
    R[$t,seqr]=$(best "${R[$t,seqr]:-}" "$(fio_job seqr "$d" --rw=read --bs=1M --iodepth=8)" 2)
  done
done

ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.2f}x' if b else '-')" "$1" "$2"; }
echo
printf '%-28s %12s %12s %12s %10s %10s\n' "job" "loop-dio" "ploop" "nbdkit+fuse" "ploop/dio" "peer/dio"
for j in rand seqw seqr; do
  case $j in rand) label="randrw 4k 70/30 QD32 IOPS"; f=1 ;; seqw) label="seq write 1M MiB/s"; f=2 ;; seqr) label="seq read 1M MiB/s"; f=2 ;; esac
  a=$(cut -d' ' -f$f <<<"${R[loop-dio,$j]}") b=$(cut -d' ' -f$f <<<"${R[ploop,$j]}") c=$(cut -d' ' -f$f <<<"${R[nbdkit+nbdfuse,$j]}")
  printf '%-28s %12s %12s %12s %10s %10s\n' "$label" "$a" "$b" "$c" "$(ratio "$b" "$a")" "$(ratio "$c" "$a")"
done
echo "(target: ploop >= 0.60x of loop-dio; ploop's FUSE transport: $transport)"
