#!/usr/bin/env bash
# ploop send | ploop receive with disks in Ceph (rbd:POOL/NAME): a full
# stream, a --since chain and a --snapshots stream into rbd compared byte for
# byte with the file-based source; rbd->files and rbd->rbd; a damaged, a
# truncated and a SIGINTed stream refused with nothing left in the pool; a
# SIGKILLed receive cleaned up by the next one; an unmarked image in the way
# refused and kept; grow-ahead leaves every image at its exact size.
source "$(dirname "$0")/functions.sh"
RBD_PORT=21600 # the cluster: 21600-21619; ploop-nbd: 21618, 21619 (no cluster daemon uses them)
source "$(dirname "$0")/rbd-lib.bash"
requires python3
export PLOOP_NO_PROGRESS=1
export PLOOP_RUN_DIR=$TMP/run
rbd_cluster_start 1
SIZE=$((32 << 20))
D=$TMP/disk

model() { # model FILE SEED: random pieces over the previous state
  python3 - "$@" <<'PY'
import os, random, sys
path, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
with open(path, "r+b") as f:
    for _ in range(8):
        f.seek((r.randrange(0, 30) << 20) + r.randrange(0, 2) * 4096)
        f.write(os.urandom(r.choice([4096, 1 << 20])))
    f.seek(r.randrange(0, 30) << 20)
    f.write(bytes(2 << 20))
PY
}
truncate -s $SIZE "$TMP/m0.raw"
declare -a S
prev=$TMP/m0.raw
for k in 1 2 3; do
  cp --sparse=always "$prev" "$TMP/m$k.raw"
  model "$TMP/m$k.raw" $k
  t "$PLOOP" import "$TMP/m$k.raw" "$D" >/dev/null
  S[k]=$(t "$PLOOP" snapshot "$D")
  prev=$TMP/m$k.raw
done
same_as() { # same_as DISK K: DISK's snapshot K exports exactly model K
  t "$PLOOP" export -f -u "${S[$2]}" -o "$TMP/x.raw" "$1" >/dev/null
  t qemu-img compare -q -f raw -F raw "$TMP/x.raw" "$TMP/m$2.raw" || fail "$1: snapshot $2 differs from its model"
}
images() { t rbd ls rbd | grep "^$1\." || true; } # the images of disk NAME
# nothing_of NAME: no image and no RADOS object of disk NAME in the pool.
nothing_of() {
  [[ -z $(images "$1") ]] || fail "$2: images of $1 left: $(images "$1")"
  [[ -z $(t rados -p rbd ls | grep "^$1\." || true) ]] || fail "$2: objects of $1 left"
}
# exact FILE: FILE ends where its BAT says data ends (grown ahead while
# written, an image must be cut back to exactly that when closed).
exact() {
  python3 - "$1" <<'PY'
import os, struct, sys
b = open(sys.argv[1], "rb").read()
cs = struct.unpack_from("<I", b, 28)[0] * 512
n, first = struct.unpack_from("<I", b, 32)[0], struct.unpack_from("<I", b, 48)[0] * 512
bat = struct.unpack_from("<%dI" % n, b, 64)
end = max([-(-first // cs)] + [e + 1 for e in bat if e]) * cs
sys.exit(0 if len(b) == end else "%s: %d bytes, data ends at %d" % (sys.argv[1], len(b), end))
PY
}
# sound NAME: every image exported by Ceph is a valid parallels image at its
# exact size, and none keeps a receive's mark.
sound() {
  local i
  for i in $(images "$1"); do
    rm -f "$TMP/img"
    t rbd export "rbd/$i" "$TMP/img" >/dev/null 2>&1
    t qemu-img check -q -f parallels "$TMP/img" || fail "rbd export of $i fails qemu-img check"
    exact "$TMP/img" || fail "$i: not cut to its data's end"
    ! t rbd image-meta get "rbd/$i" ploop.receiving >/dev/null 2>&1 || fail "$i still marked as receiving"
  done
  t "$PLOOP" check "rbd:rbd/$1" >/dev/null || fail "ploop check rbd:rbd/$1"
}

# ---- files -> rbd: a full stream, then a --since chain ----
t "$PLOOP" send -u "${S[1]}" -o "$TMP/full.stream" "$D" 2>/dev/null
t "$PLOOP" receive rbd:rbd/a <"$TMP/full.stream" 2>/dev/null
t "$PLOOP" receive "$TMP/fa" <"$TMP/full.stream" 2>/dev/null
same_as rbd:rbd/a 1
for k in 2 3; do
  t "$PLOOP" send -u "${S[k]}" --since "${S[k - 1]}" "$D" 2>/dev/null | t "$PLOOP" receive rbd:rbd/a 2>/dev/null
  t "$PLOOP" send -u "${S[k]}" --since "${S[k - 1]}" "$D" 2>/dev/null | t "$PLOOP" receive "$TMP/fa" 2>/dev/null
  same_as rbd:rbd/a $k
done
same_as rbd:rbd/a 1
sound a
# A full stream into an existing disk: one line, the disk unchanged.
before=$(images a | sort | tr '\n' ' ')
expect_fail t "$PLOOP" receive rbd:rbd/a <"$TMP/full.stream" | grep -q "a disk exists" || fail "full into a disk"
[[ $(images a | sort | tr '\n' ' ') == "$before" ]] || fail "a refused full stream changed disk a"

# ---- grow-ahead: writes through ploop-nbd leave the top at its exact size ----
serve ra 21618 rbd:rbd/a
serve fa 21619 "$TMP/fa"
for p in 21618 21619; do
  t qemu-io -f raw -c 'write -P 0x3c 0 20M' -c 'write -P 0x4d 29M 3M' -c flush \
    "nbd://127.0.0.1:$p/$([[ $p == 21618 ]] && echo ra || echo fa)" >/dev/null
done
unserve ra
unserve fa
t "$PLOOP" export -f -o "$TMP/ra.raw" rbd:rbd/a >/dev/null
t "$PLOOP" export -f -o "$TMP/fa.raw" "$TMP/fa" >/dev/null
cmp "$TMP/ra.raw" "$TMP/fa.raw" || fail "rbd and file disks differ after the same writes"
sound a

# ---- --snapshots: files -> rbd, rbd -> files, rbd -> rbd ----
t "$PLOOP" send -u "${S[3]}" --snapshots "$D" 2>/dev/null | t "$PLOOP" receive rbd:rbd/b 2>/dev/null
t "$PLOOP" send -u "${S[3]}" --snapshots rbd:rbd/b 2>/dev/null | t "$PLOOP" receive "$TMP/fb" 2>/dev/null
t "$PLOOP" send -u "${S[3]}" --snapshots rbd:rbd/b 2>/dev/null | t "$PLOOP" receive rbd:rbd/c 2>/dev/null
for k in 1 2 3; do
  same_as rbd:rbd/b $k
  same_as "$TMP/fb" $k
  same_as rbd:rbd/c $k
done
[[ $(t "$PLOOP" snapshot-list -H -o uuid rbd:rbd/c | grep -c .) -eq 4 ]] || fail "--snapshots: 3 snapshots and a top"
sound b
sound c

# ---- damaged, truncated, interrupted: one line, nothing in the pool ----
flip() { python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[int(sys.argv[3])] ^= 4; open(sys.argv[2], "wb").write(b)' "$@"; }
n=$(stat -c %s "$TMP/full.stream")
flip "$TMP/full.stream" "$TMP/bad.stream" $((n / 2))
expect_fail t "$PLOOP" receive rbd:rbd/bad <"$TMP/bad.stream" | grep -q "mismatch" || fail "flipped: wrong message"
nothing_of bad "a damaged stream"
head -c $((n - 100)) "$TMP/full.stream" >"$TMP/cut.stream"
expect_fail t "$PLOOP" receive rbd:rbd/bad <"$TMP/cut.stream" | grep -q "truncated" || fail "truncated: wrong message"
nothing_of bad "a truncated stream"
# killed_half SIG NAME: a receive into NAME fed half the stream, then SIG.
killed_half() {
  mkfifo "$TMP/fifo"
  "$PLOOP" receive "rbd:rbd/$2" <"$TMP/fifo" 2>/dev/null &
  local pid=$!
  exec 3>"$TMP/fifo"
  head -c $((n / 2)) "$TMP/full.stream" >&3
  for _ in $(seq 100); do [[ -n $(images "$2") ]] && break; sleep 0.1; done
  [[ -n $(images "$2") ]] || fail "the receive into $2 never created an image"
  sleep 0.3
  kill -"$1" $pid
  exec 3>&-
  for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  ! kill -0 $pid 2>/dev/null || fail "the receive into $2 did not stop on SIG$1"
  wait $pid 2>/dev/null || true
  rm -f "$TMP/fifo"
}
killed_half INT int
nothing_of int "an interrupted receive"
# SIGKILL: no cleanup runs; the next full receive breaks the dead receiver's
# lock, fences it and removes its marked images.
killed_half KILL k
[[ -n $(images k) ]] || fail "a killed receive left nothing to clean (test is void)"
t "$PLOOP" receive rbd:rbd/k <"$TMP/full.stream" 2>/dev/null || fail "full receive after a killed one"
same_as rbd:rbd/k 1
[[ $(images k | grep -c .) -eq 2 ]] || fail "after the killed receive: expected 2 images, got $(images k)"
sound k

# ---- an unmarked image in the way: refused, named, kept ----
t rbd create --size 4M rbd/f.root.hds
expect_fail t "$PLOOP" receive rbd:rbd/f <"$TMP/full.stream" | grep -q "f.root.hds" || fail "unmarked: not named"
[[ $(images f) == f.root.hds ]] || fail "the unmarked image was not kept alone: $(images f)"
exit 0
