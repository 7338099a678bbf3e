#!/usr/bin/env bash
# A container whose disk is in Ceph (create --disk rbd:POOL/NAME): create,
# start, write, snapshot, stop; the data is in the pool (`ploop export` of
# the rbd disk holds the file); the serving daemon holds the disk (a second
# read-write open is refused); destroy removes the disk create made and
# leaves one it only took; bad names get one line.
source "$(dirname "$0")/functions.sh"
RBD_PORT=21550 # the cluster: 21550-21569; ploop-nbd: 21596
source "$(dirname "$0")/rbd-lib.bash"
rbd_cluster_start 1
source "$(dirname "$0")/container-lib.bash" # its cleanup runs before the cluster stops
requires debugfs
ctt() { timeout 120 "$PLOOP_CONTAINER" --root "$CTROOT" "$@"; }
R="rbd:rbd/ct1?conf=$CONF"

ctt create web --size 64M --disk "$R" || fail "create on rbd"
grep -qx "disk=$R" "$CTROOT/web/config" || fail "config does not name the rbd disk: $(cat "$CTROOT/web/config")"
grep -qx "disk_created=1" "$CTROOT/web/config" || fail "config does not say create made the disk"
rbd ls rbd | grep -qx 'ct1.root.hds' || fail "no RBD image for the disk: $(rbd ls rbd)"
[[ $(ct list | awk '$1 == "web" {print $6}') == rbd ]] || fail "list does not show the rbd backend: $(ct list)"

ctt start web -- /bin/sh -c 'seq 1 20000 > /data; sync; sleep 1000'
wait_running web
for _ in $(seq 100); do [[ -s $CTROOT/web/rootfs/data ]] && [[ $(wc -l <"$CTROOT/web/rootfs/data") -eq 20000 ]] && break; sleep 0.1; done
[[ $(wc -l <"$CTROOT/web/rootfs/data") -eq 20000 ]] || fail "the container did not write its data"
# One writer: the served disk refuses a second read-write open, naming the holder.
err=$(expect_fail t "$PLOOP_NBD" -p 21596 "x=$R")
[[ $err == *"locked by"* ]] || fail "second read-write open of a running container's disk: $err"
id=$(ctt snapshot web) || fail "snapshot of the running rbd container"
ctt snapshot-list web | grep -q "$id" || fail "snapshot $id not listed"
ctt stop web --timeout 1 >/dev/null 2>&1
wait_state web stopped
assert_no_leaks web

# The bytes are in the pool: export the rbd disk, read the file with debugfs.
t "$PLOOP" export -o "$TMP/web.raw" "$R" >/dev/null || fail "ploop export of the rbd disk"
debugfs -R 'cat /data' "$TMP/web.raw" 2>/dev/null >"$TMP/data"
seq 1 20000 | cmp - "$TMP/data" || fail "the data written in the container is not in the exported disk"
t "$PLOOP" check "$R" >/dev/null || fail "check of the rbd disk after stop"

# Restart: the data is still there.
ctt start web -- /bin/sh -c 'wc -l < /data > /count; sync; sleep 1000'
wait_running web
for _ in $(seq 100); do [[ -s $CTROOT/web/rootfs/count ]] && break; sleep 0.1; done
[[ $(cat "$CTROOT/web/rootfs/count") -eq 20000 ]] || fail "data lost across a restart"
ctt stop web --timeout 1 >/dev/null 2>&1
wait_state web stopped

# destroy removes the disk create made...
ctt destroy web || fail "destroy"
rbd ls rbd | grep -q '^ct1\.' && fail "destroy left the disk's images: $(rbd ls rbd)"
rados -p rbd ls | grep -q '^ct1\.' && fail "destroy left the disk's objects: $(rados -p rbd ls)"

# ...and only that: a disk that existed is taken as it is and kept.
t "$PLOOP" init -s 64M "rbd:rbd/ct2" >/dev/null
ctt create keep --size 64M --disk rbd:rbd/ct2 || fail "create on an existing rbd disk"
grep -qx "disk_created=0" "$CTROOT/keep/config" || fail "config says create made an existing disk"
ctt start keep -- /bin/sh -c 'echo kept > /k; sync; sleep 1000'
wait_running keep
ctt stop keep --timeout 1 >/dev/null 2>&1
wait_state keep stopped
ctt destroy keep
rbd ls rbd | grep -qx 'ct2.root.hds' || fail "destroy removed a disk create did not make"
ctt create again --size 64M --disk rbd:rbd/ct2 || fail "create on the kept disk"
ctt start again -- /bin/sh -c 'cat /k > /k2; sync; sleep 1000'
wait_running again
for _ in $(seq 100); do [[ -s $CTROOT/again/rootfs/k2 ]] && break; sleep 0.1; done
[[ $(cat "$CTROOT/again/rootfs/k2") == kept ]] || fail "the kept disk lost its files"
ctt stop again --timeout 1 >/dev/null 2>&1
wait_state again stopped
ctt destroy again

# Bad names: one line, nothing made.
for bad in rbd:nopool rbd:/x rbd:p/ 'rbd:p/a/b' 'rbd:p/x?cfg=y'; do
  err=$(expect_fail ctt create bad --disk "$bad")
  [[ $(grep -c . <<<"$err") -eq 1 ]] || fail "$bad: expected one line: $err"
  [[ ! -e $CTROOT/bad ]] || fail "$bad: left $CTROOT/bad"
done
echo PASS
