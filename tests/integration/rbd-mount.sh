#!/usr/bin/env bash
# `ploop mount` of a disk in Ceph (rbd:POOL/NAME): the FUSE ring serves the
# READs and WRITEs one delta holds with librbd's aio (fuse_requests.aio in
# INFO), PLOOP_FUSE_AIO=0 sends them to the workers; the bytes equal a file
# disk's given the same writes (either way), fio verifies at QD32, SIGTERM
# with aio in flight ends the daemon cleanly, and `ploop check` is clean.
source "$(dirname "$0")/functions.sh"
RBD_PORT=21620 # the cluster: 21620-21639
source "$(dirname "$0")/rbd-lib.bash"
source "$(dirname "$0")/mount-common.inc"
requires fio
rbd_cluster_start 1

R="rbd:rbd/m1?conf=$CONF"
F=$TMP/file
SIZE=$((128 << 20))
t "$PLOOP" init -s 128M "$R" >/dev/null || fail "init of the rbd disk"
mkdir -p "$F"
t "$PLOOP" init -s 128M -t none "$F/root.hds" >/dev/null || fail "init of the file disk"
cleanup "timeout 60 '$PLOOP' umount '$R' >/dev/null 2>&1"

# aio_count DISK: fuse_requests.aio of the disk's daemon (ploop info --json).
aio_count() {
  t "$PLOOP" info --json "$1" | python3 -c '
import json, sys
print(json.load(sys.stdin)["server"]["fuse_requests"]["aio"])'
}
# daemon_pid DISK: the pid of the daemon serving the disk's top.
daemon_pid() {
  t "$PLOOP" list --json | python3 -c '
import json, sys
for a in json.load(sys.stdin):
    if a["disk"].startswith(sys.argv[1]) and not a["snapshot"]:
        print(a["pid"])' "$1"
}
# pattern DEV PASS: a fixed sequence of O_DIRECT writes, one at a time (the
# result does not depend on timing): 4 KiB to 1 MiB, some across a cluster
# boundary, some into holes, pass 1 over what pass 0 allocated.
pattern() {
  python3 - "$1" "$2" "$SIZE" <<'PY'
import mmap, os, random, sys
dev, p, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(1000 + p)
fd = os.open(dev, os.O_WRONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 20)
for i in range(400):
    n = rnd.choice([4096, 8192, 65536, 131072, 1 << 20]) if p == 0 else rnd.choice([4096, 8192, 16384])
    lim = size // 2 if p else size  # pass 1: the half pass 0 wrote most
    off = rnd.randrange(0, (lim - n) // 4096) * 4096
    buf.seek(0)
    buf.write(rnd.randbytes(n))
    assert os.pwritev(fd, [memoryview(buf)[:n]], off) == n
os.fsync(fd)
os.close(fd)
PY
}

dev=$(t "$PLOOP" mount "$R") || fail "mount of the rbd disk"
fdev=$(t "$PLOOP" mount "$F") || fail "mount of the file disk"
cleanup "timeout 60 '$PLOOP' umount '$F' >/dev/null 2>&1"
[[ -b $dev && -b $fdev ]] || fail "mount did not print devices: '$dev' '$fdev'"
a0=$(aio_count "$R")
for p in 0 1; do
  pattern "$dev" $p || fail "pattern pass $p on the rbd disk"
  pattern "$fdev" $p || fail "pattern pass $p on the file disk"
done
cmp "$dev" "$fdev" || fail "the rbd disk's bytes differ from the file disk's"
a1=$(aio_count "$R")
echo "aio requests: $((a1 - a0)) for the pattern and the compare"
((a1 - a0 >= 400)) || fail "the ring did not serve the overwrites and reads with aio ($((a1 - a0)))"
[[ $(aio_count "$F") -eq 0 ]] || fail "a file disk went through aio"
t "$PLOOP" umount "$R" >/dev/null || fail "umount of the rbd disk"

# PLOOP_FUSE_AIO=0: the same bytes, read by the workers.
dev=$(PLOOP_FUSE_AIO=0 t "$PLOOP" mount "$R") || fail "mount with PLOOP_FUSE_AIO=0"
pattern "$dev" 2 && pattern "$fdev" 2 || fail "pattern pass 2"
cmp "$dev" "$fdev" || fail "PLOOP_FUSE_AIO=0: the rbd disk's bytes differ from the file disk's"
[[ $(aio_count "$R") -eq 0 ]] || fail "PLOOP_FUSE_AIO=0 still used aio"
t "$PLOOP" umount "$R" >/dev/null || fail "umount of the rbd disk (no aio)"
t "$PLOOP" umount "$F" >/dev/null || fail "umount of the file disk"

# Parallel verified I/O at QD32, small and large, over allocated and new clusters.
dev=$(t "$PLOOP" mount "$R") || fail "mount again"
timeout 300 fio --name=v --filename="$dev" --size=48M --direct=1 --ioengine=libaio --iodepth=32 \
  --rw=randwrite --bsrange=4k-1m --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
  --output="$TMP/v.fio" >/dev/null 2>&1 || { cat "$TMP/v.fio"; fail "fio verify at QD32"; }
timeout 300 fio --name=o --filename="$dev" --size=48M --direct=1 --ioengine=libaio --iodepth=32 \
  --rw=randwrite --bs=4k --number_ios=3000 --verify=crc32c --verify_fatal=1 --do_verify=1 \
  --verify_state_save=0 --output="$TMP/o.fio" >/dev/null 2>&1 || { cat "$TMP/o.fio"; fail "fio 4k overwrite verify"; }
a2=$(aio_count "$R")
echo "aio requests after fio: $a2"
((a2 >= 3000)) || fail "fio's 4k overwrites did not go through aio ($a2)"

# SIGTERM while fio keeps 32 requests in flight: the daemon exits in time,
# fio gets errors (no hang), umount cleans up, the disk checks clean.
pid=$(daemon_pid "rbd:rbd/m1")
[[ -n $pid ]] || fail "no daemon pid for the rbd disk: $(t "$PLOOP" list --json)"
log=$(readlink "/proc/$pid/fd/2")
timeout 60 fio --name=k --filename="$dev" --size=48M --direct=1 --ioengine=libaio --iodepth=32 \
  --rw=randrw --bs=4k --time_based --runtime=30 >/dev/null 2>&1 &
fio_pid=$!
cleanup "kill $fio_pid 2>/dev/null"
b0=$(aio_count "$R")
for _ in $(seq 50); do (($(aio_count "$R") > b0 + 500)) && break; sleep 0.1; done
(($(aio_count "$R") > b0 + 500)) || fail "no aio traffic before SIGTERM"
kill -TERM "$pid"
for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the daemon did not exit within 15 s of SIGTERM with aio in flight"
wait "$fio_pid" && fail "fio did not see the daemon go" || true
if grep -qE "AddressSanitizer|runtime error|LeakSanitizer" "$log" 2>/dev/null; then
  cat "$log"
  fail "the daemon's log has a sanitizer report"
fi
t "$PLOOP" umount "$R" >/dev/null 2>&1 || true
t "$PLOOP" check "$R" >"$TMP/check" 2>&1 || { cat "$TMP/check"; fail "ploop check after SIGTERM"; }
dev=$(t "$PLOOP" mount "$R") || fail "mount after SIGTERM"
t "$PLOOP" umount "$R" >/dev/null || fail "umount after SIGTERM"
echo PASS
