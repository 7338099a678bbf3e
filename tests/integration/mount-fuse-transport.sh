#!/usr/bin/env bash
# The FUSE export's two transports: FUSE over io_uring (the default where the
# kernel has it) and /dev/fuse reads (PLOOP_FUSE_URING=0, and the fallback).
# Each serves parallel verified random I/O, and each daemon stops on SIGTERM
# even while the loop device still holds the FUSE file: the mount then gets
# I/O errors (no hang), umount cleans up, and synced data survives.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/mount-common.inc"
requires fio

# threads PID NAME: how many of the daemon's threads are called NAME.
threads() { cat /proc/"$1"/task/*/comm 2>/dev/null | grep -cx "$2" || true; }
# fuse_counts DIR: "served ring_io workers" from the daemon's INFO (via ploop info --json).
fuse_counts() {
  "$PLOOP" info --json "$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)["server"]["fuse_requests"]
print(r["ring"], r["ring_io"], r["workers"])'
}

run_case() { # run_case NAME URING(0|1)
  local name=$1 uring=$2 D=$TMP/$1 MP=$TMP/$1.mnt dev pid state
  mkdir -p "$MP"
  new_disk "$D" 256M
  dev=$(PLOOP_FUSE_URING=$uring att_mount "$D" "$MP")
  read -r pid state < <(att_daemon "$D")
  [[ $state == alive ]] || fail "$name: no live daemon"
  local ring dev_readers
  ring=$(threads "$pid" ploop-fuse-ring) dev_readers=$(threads "$pid" ploop-fuse-dev)
  echo "$name: $ring ring threads, $dev_readers /dev/fuse readers"
  if ((uring)); then
    ((ring > 0)) || fail "$name: no io_uring threads although the kernel has FUSE over io_uring"
    [[ $(cat /sys/module/fuse/parameters/enable_uring) == Y ]] || fail "$name: enable_uring not set"
    # The ring took over: only the couple of readers for FORGET/INTERRUPT remain.
    ((dev_readers <= 2)) || fail "$name: $dev_readers /dev/fuse readers beside the ring"
  else
    ((ring == 0 && dev_readers > 0)) || fail "$name: PLOOP_FUSE_URING=0 should serve from /dev/fuse"
  fi

  # Parallel small and large requests, checked on read back.
  fio --name=v --filename="$MP/fio.dat" --size=48M --direct=1 --ioengine=libaio --iodepth=32 \
    --rw=randwrite --bsrange=4k-1m --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
    --output="$TMP/$name.fio" >/dev/null 2>&1 || { cat "$TMP/$name.fio"; fail "$name: fio verify failed"; }
  if ((uring)); then
    # Overwrites of allocated clusters are served on the ring threads as
    # io_uring reads/writes of the image (ploop_disk_map); the workers get
    # only what may block (allocation, flush).
    local s0 i0 w0 s1 i1 w1
    read -r s0 i0 w0 < <(fuse_counts "$D")
    fio --name=o --filename="$MP/fio.dat" --size=48M --direct=1 --ioengine=libaio --iodepth=32 \
      --rw=randrw --bs=4k --number_ios=4000 >/dev/null 2>&1 || fail "$name: overwrite fio failed"
    read -r s1 i1 w1 < <(fuse_counts "$D")
    echo "$name: 4k overwrites: $((s1 - s0)) requests, $((i1 - i0)) by the ring's own I/O, $((w1 - w0)) to workers"
    ((s1 - s0 >= 4000)) || fail "$name: fewer ring requests than fio's 4000 I/Os"
    ((100 * (i1 - i0) >= 95 * (s1 - s0))) || fail "$name: overwrites did not go through the ring's own I/O"
    [[ $("$PLOOP" info "$D") == *"FUSE over io_uring"* ]] || fail "$name: ploop info does not name the transport"
  else
    [[ $("$PLOOP" info "$D") == *"FUSE over /dev/fuse"* ]] || fail "$name: ploop info does not name the transport"
  fi
  head -c 3000000 /dev/urandom >"$MP/kept"
  sync "$MP/kept"
  sum "$MP/kept" >"$TMP/$name.sum"

  # SIGTERM with the loop device still bound: the daemon must still exit.
  kill -TERM "$pid"
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "$name: daemon ignored SIGTERM while the loop device held the file"
  local rc=0
  timeout 30 bash -c "head -c 1M /dev/urandom >'$MP/after' && sync '$MP/after'" 2>/dev/null || rc=$?
  [[ $rc -ne 124 ]] || fail "$name: a write after the daemon stopped hung"
  [[ $rc -ne 0 ]] || fail "$name: a synced write succeeded with no daemon"
  timeout 60 "$PLOOP" umount "$D" || fail "$name: umount after the daemon stopped failed"
  no_leaks "$D" "$dev"

  # A SIGTERM closes the image cleanly: it mounts again without a check.
  PLOOP_FUSE_URING=$uring att_mount "$D" "$MP" >/dev/null || fail "$name: remount failed"
  [[ $(sum "$MP/kept") == $(cat "$TMP/$name.sum") ]] || fail "$name: synced data changed"
  att_umount "$D"
  no_leaks "$D"
}

# Reads of the bare device whose range spans clusters: data + hole, hole +
# data, and long runs, against a model file; the ring serves these as one
# request in several pieces (file I/O and zeros), the /dev/fuse path through
# ploop_disk_pread.
pieces_case() { # pieces_case URING
  local uring=$1 D=$TMP/pieces$1 dev spec
  mkdir -p "$D"
  "$PLOOP" init -s 64M -t none "$D/root.hds" >/dev/null
  dev=$(PLOOP_FUSE_URING=$uring att_mount "$D")
  truncate -s 64M "$TMP/model"
  head -c 8192 /dev/urandom >"$TMP/a"
  head -c 8192 /dev/urandom >"$TMP/b"
  for spec in "a 254" "b 512"; do # 4 KiB blocks; 256 per 1 MiB cluster
    set -- $spec
    dd if="$TMP/$1" of="$dev" bs=4096 seek="$2" oflag=direct conv=notrunc status=none
    dd if="$TMP/$1" of="$TMP/model" bs=4096 seek="$2" conv=notrunc status=none
  done
  for spec in "254 4" "255 2" "510 4" "511 2" "250 300" "0 1024"; do
    set -- $spec
    cmp <(dd if="$dev" bs=4096 skip="$1" count="$2" iflag=direct status=none) \
      <(dd if="$TMP/model" bs=4096 skip="$1" count="$2" status=none) ||
      fail "uring=$uring: blocks $spec read back wrong"
  done
  echo "pieces uring=$uring: reads across clusters, holes and data, match the model"
  att_umount "$D"
  no_leaks "$D"
}

if [[ -w /sys/module/fuse/parameters/enable_uring ]]; then
  run_case io_uring 1
  pieces_case 1
else
  echo "kernel without FUSE over io_uring: only the /dev/fuse path is tested"
fi
run_case devfuse 0
pieces_case 0
echo "mount-fuse-transport: ok"
