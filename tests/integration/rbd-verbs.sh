#!/usr/bin/env bash
# A disk in Ceph (rbd:POOL/NAME) through every verb, compared byte for byte
# with the same verbs on a local disk: import/export, snapshots before and
# after a merge, resize, check, send/receive, ploop-nbd serving (qemu-img
# compare of the two exports); the top delta exported by `rbd export` is a
# valid parallels image; bad input gets one line.
source "$(dirname "$0")/functions.sh"
RBD_PORT=21700
source "$(dirname "$0")/rbd-lib.bash"
rbd_cluster_start 1
R="rbd:rbd/v1?conf=$CONF" # the configuration named in the URI
F=$TMP/file
python3 - "$TMP/src.raw" <<'PY'
import random, sys
r = random.Random(7)
with open(sys.argv[1], "wb") as f:
    for i in range(24):
        f.write(bytes(1 << 20) if i % 5 == 2 else r.randbytes(1 << 20))
PY
t "$PLOOP" import "$TMP/src.raw" "$R" >/dev/null
t "$PLOOP" import "$TMP/src.raw" "$F" >/dev/null
t "$PLOOP" export -o "$TMP/r0.raw" "$R" >/dev/null
cmp "$TMP/src.raw" "$TMP/r0.raw" || fail "rbd export differs from the imported source"
t "$PLOOP" info "$R" | grep -q 'virtual size: *24.0 MiB' || fail "info of the rbd disk"

# The same snapshot and writes on both, through ploop-nbd.
s_r=$(t "$PLOOP" snapshot "$R")
s_f=$(t "$PLOOP" snapshot "$F")
serve r 21760 "$R"
serve f 21761 "$F"
for p in 21760 21761; do
  t qemu-io -f raw -c 'write -P 0x5a 1M 4k' -c 'write -P 0x6b 7M 1M' -c 'write -P 0x7c 23M 512k' \
    -c flush "nbd://127.0.0.1:$p/$([[ $p == 21760 ]] && echo r || echo f)" >/dev/null
done
t qemu-img compare -f raw -F raw nbd://127.0.0.1:21760/r nbd://127.0.0.1:21761/f >/dev/null ||
  fail "the rbd disk and the file disk differ through ploop-nbd"
# Online snapshot of the served rbd disk, then more writes.
t "$PLOOP" snapshot "$R" >/dev/null
t "$PLOOP" snapshot "$F" >/dev/null
t qemu-io -f raw -c 'write -P 0x11 2M 8k' nbd://127.0.0.1:21760/r >/dev/null
t qemu-io -f raw -c 'write -P 0x11 2M 8k' nbd://127.0.0.1:21761/f >/dev/null
t qemu-img compare -f raw -F raw nbd://127.0.0.1:21760/r nbd://127.0.0.1:21761/f >/dev/null ||
  fail "differ after the online snapshot"
unserve r
unserve f
[[ $(t "$PLOOP" snapshot-list "$R" | wc -l) -eq 4 ]] || fail "rbd disk: expected 3 images in snapshot-list"
t "$PLOOP" export -o "$TMP/r1.raw" "$R" >/dev/null
t "$PLOOP" export -o "$TMP/f1.raw" "$F" >/dev/null
cmp "$TMP/r1.raw" "$TMP/f1.raw" || fail "exports differ before the merge"
t "$PLOOP" export -u "$s_r" -o "$TMP/rs.raw" "$R" >/dev/null
cmp "$TMP/rs.raw" "$TMP/src.raw" || fail "the first snapshot of the rbd disk is not the imported source"
t "$PLOOP" check "$R" >/dev/null || fail "check of the rbd disk"

# The top as Ceph holds it is a parallels image qemu-img accepts.
top=$(rbd ls rbd | grep '^v1\.root\.hds\.' | head -1)
t rbd export "rbd/$top" "$TMP/top.hds" >/dev/null 2>&1
t qemu-img check -f parallels "$TMP/top.hds" >/dev/null || fail "rbd export of the top fails qemu-img check"

# Merge everything, then resize: still equal, and to the state before.
t "$PLOOP" snapshot-merge -A "$R" >/dev/null
t "$PLOOP" snapshot-merge -A "$F" >/dev/null
[[ $(t "$PLOOP" snapshot-list "$R" | wc -l) -eq 2 ]] || fail "rbd disk: merge left snapshots"
[[ $(rbd ls rbd | grep -c '^v1\.') -eq 1 ]] || fail "merge left RBD images behind: $(rbd ls rbd)"
t "$PLOOP" export -o "$TMP/r2.raw" "$R" >/dev/null
cmp "$TMP/r2.raw" "$TMP/r1.raw" || fail "the merge changed the rbd disk's contents"
t "$PLOOP" resize -s 40M "$R" >/dev/null
t "$PLOOP" resize -s 40M "$F" >/dev/null
t "$PLOOP" export -o "$TMP/r3.raw" "$R" >/dev/null
t "$PLOOP" export -o "$TMP/f3.raw" "$F" >/dev/null
cmp "$TMP/r3.raw" "$TMP/f3.raw" || fail "exports differ after the resize"
t "$PLOOP" check "$R" >/dev/null || fail "check after merge and resize"

# send from Ceph, receive into a local disk.
t "$PLOOP" send -o "$TMP/s.stream" "$R" >/dev/null
t "$PLOOP" receive "$TMP/recv" <"$TMP/s.stream" >/dev/null
t "$PLOOP" export -o "$TMP/rr.raw" "$TMP/recv" >/dev/null
cmp "$TMP/rr.raw" "$TMP/r3.raw" || fail "send from rbd / receive differs"

# Bad input: one line, non-zero, nothing changed.
expect_fail t "$PLOOP" init -s 8M "$R" >/dev/null
expect_fail t "$PLOOP" info "rbd:rbd" >/dev/null
expect_fail t "$PLOOP" info "rbd:rbd/nope" >/dev/null
t "$PLOOP" export -o "$TMP/r4.raw" "$R" >/dev/null
cmp "$TMP/r4.raw" "$TMP/r3.raw" || fail "a refused verb changed the disk"
echo PASS
