#!/usr/bin/env bash
# Two OSDs, pool size 2: one OSD killed while 4k writes go to a served rbd
# disk; every write ploop-nbd acknowledged is there afterwards, read back
# through a fresh server and compared with the same writes on a local disk.
source "$(dirname "$0")/functions.sh"
RBD_PORT=21740
source "$(dirname "$0")/rbd-lib.bash"
rbd_cluster_start 2
R=rbd:rbd/k1
F=$TMP/file
t "$PLOOP" init -s 32M "$R" >/dev/null
t "$PLOOP" init -t none -s 32M "$F" >/dev/null
python3 - "$TMP" <<'PY'
import random, sys
r = random.Random(11)
for part in (1, 2):
    with open(f"{sys.argv[1]}/w{part}.qio", "w") as f:
        for i in range(150):
            off = r.randrange(0, (32 << 20) // 4096) * 4096
            f.write(f"write -P {r.randrange(1, 255)} {off} 4k\n")
PY
serve r 21780 "$R"
serve f 21781 "$F"
# Part 1 with an OSD killed under it, part 2 with one OSD left.
mapfile -t w1 <"$TMP/w1.qio"
mapfile -t w2 <"$TMP/w2.qio"
args1=() args2=()
for c in "${w1[@]}"; do args1+=(-c "$c"); done
for c in "${w2[@]}"; do args2+=(-c "$c"); done
t qemu-io -f raw "${args1[@]}" -c flush nbd://127.0.0.1:21780/r >"$TMP/q1.out" &
q=$!
sleep 0.3
"$TOP/scripts/ceph-cluster.sh" kill-osd "$CEPH_DIR" 0
wait $q || fail "writes failed while one OSD was killed (pool size 2)"
[[ $(grep -c '^wrote' "$TMP/q1.out") -eq 150 ]] || fail "not every write was acknowledged"
t qemu-io -f raw "${args2[@]}" -c flush nbd://127.0.0.1:21780/r >/dev/null || fail "writes with one OSD left"
t qemu-io -f raw "${args1[@]}" "${args2[@]}" -c flush nbd://127.0.0.1:21781/f >/dev/null
unserve r
# Read back through a fresh server (a new client, nothing cached).
serve r2 21782 "$R"
t qemu-img compare -f raw -F raw nbd://127.0.0.1:21782/r2 nbd://127.0.0.1:21781/f >/dev/null ||
  fail "an acknowledged write is missing after the OSD kill"
unserve r2
"$TOP/scripts/ceph-cluster.sh" start-osd "$CEPH_DIR" 0
t "$PLOOP" check "$R" >/dev/null || fail "check after the OSD kill"
echo PASS
