#!/usr/bin/env bash
# ploop send | ploop receive: a full send, a chain of --since sends and a
# --snapshots send reproduce every snapshot byte for byte (qemu-img compare
# of exports against the models); --compress; --to/--listen over TCP on
# 127.0.0.1 with --json; a flipped bit and a truncated stream refused with
# one line and nothing left (no directory, or for an incremental every file
# unchanged); a snapshot sent while ploop-nbd serves the disk read-write;
# the received images pass `ploop check` and `qemu-img check -f parallels`.
source "$(dirname "$0")/functions.sh"
requires qemu-img
requires qemu-io
requires python3
[[ -x $PLOOP && -x $PLOOP_NBD ]] || skip "ploop / ploop-nbd not built in $BUILD"
export PLOOP_NO_PROGRESS=1
export PLOOP_RUN_DIR=$TMP/run
PORT=$((21200 + RANDOM % 90)) # this branch's range: 21200-21299
SIZE=$((128 << 20))
D=$TMP/disk

# model K: the disk's state at snapshot K, as a raw file.
model() { # model FILE SEED: random 1 MiB pieces and text (compressible) pieces
  python3 - "$@" <<'PY'
import os, random, sys
path, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
with open(path, "r+b") as f:
    for _ in range(16):
        off = r.randrange(0, 126) << 20
        f.seek(off + r.randrange(0, 2) * 4096)
        f.write(os.urandom(r.choice([4096, 1 << 20])) if r.random() < 0.6 else b"ploop stream text " * 40000)
    f.seek(r.randrange(0, 126) << 20)
    f.write(bytes(3 << 20))  # zeros over whatever was there: a cluster the base had reads as zero
PY
}
truncate -s $SIZE "$TMP/m0.raw"
declare -a S
prev=$TMP/m0.raw
for k in 1 2 3; do
  cp --sparse=always "$prev" "$TMP/m$k.raw"
  model "$TMP/m$k.raw" $k
  $PLOOP import "$TMP/m$k.raw" "$D" >/dev/null
  S[k]=$($PLOOP snapshot "$D")
  prev=$TMP/m$k.raw
done

# same_as DIR K: DIR's snapshot K exports exactly model K (and the source's export).
same_as() {
  $PLOOP export -f -u "${S[$2]}" -o "$TMP/x.raw" "$1" >/dev/null
  qemu-img compare -q -f raw -F raw "$TMP/x.raw" "$TMP/m$2.raw" || fail "$1: snapshot $2 differs from its model"
}
# images_ok DIR: ploop check, and qemu reads every delta as a sound parallels image.
images_ok() {
  $PLOOP check "$1" >/dev/null || fail "$1: ploop check"
  local f
  for f in "$1"/root.hds*; do
    qemu-img check -q -f parallels "$f" || fail "$f: qemu-img check"
  done
}
# Every file of a disk directory (the lock file records its last holder's pid: left out).
digest() { (cd "$1" && find . -type f ! -name '*.lck' -print0 | sort -z | xargs -0 sha256sum); }

# ---- full send of snapshot 1, then a chain of --since sends ----
R=$TMP/recv
$PLOOP send -u "${S[1]}" "$D" | $PLOOP receive "$R" 2>"$TMP/recv.err"
grep -q "^receive ${S[1]}: .* received, [0-9]* clusters, .*/s, .* s$" "$TMP/recv.err" ||
  fail "receive summary: $(cat "$TMP/recv.err")"
same_as "$R" 1
$PLOOP export -f -u "${S[1]}" -o "$TMP/src1.raw" "$D" >/dev/null
$PLOOP export -f -u "${S[1]}" -o "$TMP/dst1.raw" "$R" >/dev/null
qemu-img compare -q -f raw -F raw "$TMP/src1.raw" "$TMP/dst1.raw" || fail "exports of snapshot 1 differ"
for k in 2 3; do
  $PLOOP send -u "${S[k]}" --since "${S[k - 1]}" "$D" 2>/dev/null | $PLOOP receive "$R" 2>/dev/null
  same_as "$R" $k
done
same_as "$R" 1
images_ok "$R"
# An incremental stream sent twice: the copy already holds it.
$PLOOP send -u "${S[3]}" --since "${S[2]}" -o "$TMP/inc3.stream" "$D" 2>/dev/null
expect_fail $PLOOP receive "$R" <"$TMP/inc3.stream" | grep -q "already holds snapshot ${S[3]}" ||
  fail "a stream applied twice"

# ---- --snapshots: the whole chain, GUIDs kept ----
$PLOOP send -u "${S[3]}" --snapshots "$D" 2>/dev/null | $PLOOP receive "$TMP/chain" 2>/dev/null
for k in 1 2 3; do same_as "$TMP/chain" $k; done
[[ $($PLOOP snapshot-list -H -o uuid "$TMP/chain" | grep -c .) -eq 4 ]] || fail "--snapshots: 3 snapshots and a top"
images_ok "$TMP/chain"

# ---- --compress: smaller, same bytes ----
$PLOOP send -u "${S[3]}" -o "$TMP/plain.stream" "$D" 2>/dev/null
$PLOOP send -u "${S[3]}" --compress -o "$TMP/z.stream" "$D" 2>/dev/null
[[ ! -e $TMP/z.stream.tmp ]] || fail "-o left its .tmp"
(($(stat -c %s "$TMP/z.stream") < $(stat -c %s "$TMP/plain.stream") * 9 / 10)) ||
  fail "--compress: $(stat -c %s "$TMP/z.stream") vs $(stat -c %s "$TMP/plain.stream") bytes"
$PLOOP receive "$TMP/z" <"$TMP/z.stream" 2>/dev/null
same_as "$TMP/z" 3

# ---- over TCP on 127.0.0.1, with --json on both ends ----
$PLOOP receive --listen 127.0.0.1:$PORT --json "$TMP/tcp" >"$TMP/recv.json" 2>"$TMP/recv.log" &
RPID=$!
cleanup "kill $RPID 2>/dev/null"
for _ in $(seq 100); do ss -Hltn "sport = :$PORT" | grep -q . && break; sleep 0.05; done
$PLOOP send -u "${S[3]}" --snapshots --compress --to 127.0.0.1:$PORT --json "$D" >"$TMP/send.json"
wait $RPID || fail "receive --listen: $(cat "$TMP/recv.log")"
python3 - "$TMP/send.json" "$TMP/recv.json" "${S[3]}" <<'PY' || fail "--json output"
import json, sys
s, r = (json.load(open(p)) for p in sys.argv[1:3])
assert s["guid"] == r["guid"] == sys.argv[3], (s, r)
assert s["bytes_sent"] == r["bytes_received"] > 0, (s, r)
assert s["clusters"] == r["clusters"] > 0 and s["seconds"] >= 0, (s, r)
PY
for k in 1 3; do same_as "$TMP/tcp" $k; done
# JSON of a send whose stream is stdout goes to stderr.
$PLOOP send -u "${S[1]}" --json "$D" 2>"$TMP/send2.json" >/dev/null
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["bytes_sent"] > 0' "$TMP/send2.json" ||
  fail "send --json to stderr"

# ---- damaged streams: one line, nothing left ----
flip() { python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[int(sys.argv[3])] ^= 4; open(sys.argv[2], "wb").write(b)' "$@"; }
full=$TMP/plain.stream
n=$(stat -c %s "$full")
# In the first frame's payload, in its header's checksum, anywhere in the middle.
for at in $((96 + 48 + 1000)) $((96 + 40)) $((n / 2)); do
  flip "$full" "$TMP/bad.stream" $at
  msg=$(expect_fail $PLOOP receive "$TMP/bad1" <"$TMP/bad.stream")
  [[ $at -eq $((n / 2)) || $msg =~ ^ploop\ receive:\ stream:\ frame\ 0:\ (payload\ )?checksum\ mismatch$ ]] ||
    fail "a bit flipped at $at: $msg"
  [[ ! -e $TMP/bad1 ]] || fail "a refused full stream left its directory"
done
head -c $((n - 100)) "$full" >"$TMP/cut.stream"
expect_fail $PLOOP receive "$TMP/bad2" <"$TMP/cut.stream" | grep -q "truncated" || fail "truncated: wrong message"
[[ ! -e $TMP/bad2 ]] || fail "a truncated full stream left its directory"
# A receive killed half-way (SIGKILL: no cleanup runs) leaves no DIR either:
# a full receive builds in a hidden directory beside it, renamed at the end.
mkfifo "$TMP/fifo"
$PLOOP receive "$TMP/killed" <"$TMP/fifo" 2>/dev/null &
KPID=$!
exec 3>"$TMP/fifo"
head -c $((n / 2)) "$full" >&3
for _ in $(seq 100); do compgen -G "$TMP/.killed.receive-*/root.hds" >/dev/null && break; sleep 0.05; done
compgen -G "$TMP/.killed.receive-*/root.hds" >/dev/null || fail "the killed receive never started writing"
kill -9 $KPID
wait $KPID 2>/dev/null || true
exec 3>&-
[[ ! -e $TMP/killed ]] || fail "a killed full receive left $TMP/killed"
# Incremental: the copy stays exactly as it was.
$PLOOP send -u "${S[1]}" "$D" 2>/dev/null | $PLOOP receive "$TMP/inc" 2>/dev/null
before=$(digest "$TMP/inc")
$PLOOP send -u "${S[3]}" --since "${S[1]}" --snapshots -o "$TMP/inc.stream" "$D" 2>/dev/null
n=$(stat -c %s "$TMP/inc.stream")
flip "$TMP/inc.stream" "$TMP/bad.stream" $((n - 200))
expect_fail $PLOOP receive "$TMP/inc" <"$TMP/bad.stream" >/dev/null
[[ $(digest "$TMP/inc") == "$before" ]] || fail "a refused incremental stream changed the copy"
head -c $((n / 3)) "$TMP/inc.stream" | expect_fail $PLOOP receive "$TMP/inc" >/dev/null
[[ $(digest "$TMP/inc") == "$before" ]] || fail "a truncated incremental stream changed the copy"
$PLOOP receive "$TMP/inc" <"$TMP/inc.stream" 2>/dev/null
for k in 2 3; do same_as "$TMP/inc" $k; done
# A send that fails leaves no file.
expect_fail $PLOOP send -u "{11111111-2222-3333-4444-555555555555}" -o "$TMP/none.stream" "$D" >/dev/null
[[ ! -e $TMP/none.stream && ! -e $TMP/none.stream.tmp ]] || fail "a failed send left a file"

# ---- online: a snapshot of the served disk, sent while clients write ----
SOCK=$TMP/nbd.sock
$PLOOP_NBD -U "$SOCK" "$D" 2>"$TMP/server.log" &
SPID=$!
cleanup "kill $SPID 2>/dev/null; wait $SPID 2>/dev/null"
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || fail "ploop-nbd did not start: $(cat "$TMP/server.log")"
U="nbd+unix:///?socket=$SOCK"
qemu-io -f raw -c "write -P 0x5a 8M 5M" "$U" >/dev/null
cp --sparse=always "$TMP/m3.raw" "$TMP/m4.raw"
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(8 << 20); f.write(b"\x5a" * (5 << 20))' "$TMP/m4.raw"
S[4]=$($PLOOP snapshot "$D")
[[ ${S[4]} =~ ^\{[0-9a-f-]{36}\}$ ]] || fail "online snapshot printed '${S[4]}'"
# Writes go on while the snapshot is sent.
qemu-io -f raw -c "write -P 0x33 0 64M" "$U" >/dev/null &
WPID=$!
$PLOOP send -u "${S[4]}" --since "${S[3]}" "$D" 2>/dev/null | $PLOOP receive "$R" 2>/dev/null
wait $WPID
for k in 3 4; do same_as "$R" $k; done
$PLOOP send -u "${S[4]}" "$D" 2>/dev/null | $PLOOP receive "$TMP/online-full" 2>/dev/null
same_as "$TMP/online-full" 4
kill $SPID
wait $SPID 2>/dev/null || true
images_ok "$R"
images_ok "$TMP/online-full"

# ---- --snapshots carries the whole tree: a branch left by snapshot-switch ----
# T: base state 1, snapshot A; state 2, snapshot B; back to A; state 3,
# snapshot C. B is a branch off A that the top's chain does not hold.
T=$TMP/tree
$PLOOP import "$TMP/m1.raw" "$T" >/dev/null
A=$($PLOOP snapshot "$T")
$PLOOP import "$TMP/m2.raw" "$T" >/dev/null
B=$($PLOOP snapshot "$T")
$PLOOP snapshot-switch -u "$A" "$T" >/dev/null
$PLOOP import "$TMP/m3.raw" "$T" >/dev/null
C=$($PLOOP snapshot "$T")
$PLOOP send -u "$C" --snapshots "$T" 2>/dev/null | $PLOOP receive "$TMP/tree-copy" 2>/dev/null ||
  fail "a tree did not travel"
tree_of() { $PLOOP snapshot-list -H -o uuid,parent_uuid "$1" | grep -v -i '5fbaabe3' | sort; }
[[ $(tree_of "$T") == "$(tree_of "$TMP/tree-copy")" ]] ||
  fail "the tree differs: $(tree_of "$T") / $(tree_of "$TMP/tree-copy")"
tree_of "$TMP/tree-copy" | grep -q "^$B $A" || fail "B is not a child of A: $(tree_of "$TMP/tree-copy")"
for pair in "$A 1" "$B 2" "$C 3"; do
  set -- $pair
  $PLOOP export -f -u "$1" -o "$TMP/x.raw" "$TMP/tree-copy" >/dev/null
  qemu-img compare -q -f raw -F raw "$TMP/x.raw" "$TMP/m$2.raw" || fail "tree copy: snapshot $1 differs from model $2"
done
images_ok "$TMP/tree-copy"
# the top's state: the same tree and the state sent above C
$PLOOP send --snapshots "$T" 2>/dev/null | $PLOOP receive "$TMP/tree-top" 2>/dev/null || fail "top of a tree"
[[ $(tree_of "$TMP/tree-top" | grep -v " $C\$") == "$(tree_of "$T")" ]] ||
  fail "the top's tree differs: $(tree_of "$TMP/tree-top")"
echo "tree: ok"
echo "send-receive: OK"
