#!/usr/bin/env bash
# Online operations through ploop-nbd's control socket while clients write:
# a snapshot taken mid-stream is consistent (every write acknowledged before
# it is in it, nothing sent after it is, no write torn), appears at once as
# a read-only NAME@UUID export; dirty tracking reports exactly the written
# clusters; merge is refused while a snapshot is exported, then works;
# resize is seen by new connections; the image is clean at the end.
. "$(dirname "$0")/functions.sh"
requires nbdinfo
requires nbdcopy
requires python3
[[ -x $PLOOP && -x $PLOOP_NBD ]] || skip "ploop / ploop-nbd not built"

export PLOOP_RUN_DIR=$TMP/run
mkdir -p "$TMP/disk"
$PLOOP init -t none -s 128M "$TMP/disk/root.hds" >/dev/null
SOCK=$TMP/nbd.sock
$PLOOP_NBD -U "$SOCK" "$TMP/disk" 2>"$TMP/server.log" &
SPID=$!
cleanup "kill $SPID 2>/dev/null; wait $SPID 2>/dev/null"
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || fail "server did not start: $(cat "$TMP/server.log")"
U="nbd+unix:///?socket=$SOCK"
CTL_SOCK=$($PLOOP_NBD --ctl-path "$TMP/disk")
[[ -S $CTL_SOCK && $CTL_SOCK == "$TMP/run/"*.ctl ]] || fail "control socket $CTL_SOCK missing"

# Generation 0 everywhere, written with nbdcopy.
python3 - "$TMP/gen0.raw" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:
    for i in range(2048):
        f.write(struct.pack(">QQ", 0, i) * 4096)
PY
nbdcopy --flush "$TMP/gen0.raw" "$U"

# ---- snapshot while a pipelined writer overwrites with generation 1 ----
python3 - "$SOCK" "$CTL_SOCK" "$TMP/snap.guid" "$TMP/snap.sets" <<'PY'
import socket, struct, sys, threading, time
sock, ctl, guid_out, sets_out = sys.argv[1:]
BS, N, QD = 65536, 2048, 16

def rd(s, n):
    d = b""
    while len(d) < n:
        c = s.recv(n - len(d)); assert c, "server closed"
        d += c
    return d

s = socket.socket(socket.AF_UNIX); s.connect(sock)
rd(s, 18); s.sendall(struct.pack(">I", 3) + struct.pack(">QII", 0x49484156454F5054, 1, 0))
size, flags = struct.unpack(">QH", rd(s, 10))
lock = threading.Lock(); sent = set(); acked = set(); slots = threading.Semaphore(QD)
def reader():
    for _ in range(N):
        magic, err, cookie = struct.unpack(">IIQ", rd(s, 16))
        assert magic == 0x67446698 and err == 0, (magic, err)
        with lock: acked.add(cookie)
        slots.release()
t = threading.Thread(target=reader); t.start()
def writer():
    for i in range(N):
        slots.acquire()
        with lock: sent.add(i)
        s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 1, i, i * BS, BS) + struct.pack(">QQ", 1, i) * 4096)
        time.sleep(0.001)  # keep the stream going while the snapshot happens
w = threading.Thread(target=writer); w.start()
while True:
    with lock:
        if len(acked) >= N // 3: break
    time.sleep(0.001)
with lock: before = set(acked)
c = socket.socket(socket.AF_UNIX); c.connect(ctl)
f = c.makefile("rwb")
hello = f.readline().decode()
assert hello.startswith("ploop-nbd 1 "), hello
f.write(b"SNAPSHOT\n"); f.flush()
resp = f.readline().decode().strip()
with lock: after = set(sent)
assert resp.startswith("OK {"), resp
w.join(); t.join()
assert len(before) < N, "writer finished before the snapshot: no overlap"
if len(after) == N:
    print("note: every write was sent before the snapshot answered (slow snapshot)")
open(guid_out, "w").write(resp[3:] + "\n")
open(sets_out, "w").write("%s\n%s\n" % (" ".join(map(str, sorted(before))), " ".join(map(str, sorted(after)))))
s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 2, 0, 0, 0)); s.close()
print("snapshot after %d acked, %d sent of %d writes" % (len(before), len(after), N))
PY
GUID=$(cat "$TMP/snap.guid")
UUID=${GUID#\{}
UUID=${UUID%\}}
SU="nbd+unix:///disk@$UUID?socket=$SOCK"

nbdinfo --list "$U" | grep -q "export=\"disk@$UUID\"" || fail "snapshot not listed as an export"
[[ $(nbdinfo --json "$SU" | python3 -c 'import json,sys; print(json.load(sys.stdin)["exports"][0]["is_read_only"])') == True ]] ||
  fail "snapshot export not read-only"
nbdcopy "$SU" "$TMP/snap.raw"
nbdcopy "$U" "$TMP/live.raw"
python3 - "$TMP/snap.raw" "$TMP/live.raw" "$TMP/snap.sets" <<'PY'
import struct, sys
snap, live = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
before, after = (set(map(int, l.split())) for l in open(sys.argv[3]).read().split("\n")[:2])
BS = 65536
old_n = new_n = 0
for i in range(2048):
    blk = snap[i * BS:(i + 1) * BS]
    old, new = struct.pack(">QQ", 0, i) * 4096, struct.pack(">QQ", 1, i) * 4096
    assert blk in (old, new), "block %d of the snapshot is torn or foreign" % i
    if i in before: assert blk == new, "acknowledged write %d missing from the snapshot" % i
    if i not in after: assert blk == old, "write %d, sent after the snapshot, is in it" % i
    old_n += blk == old; new_n += blk == new
    assert live[i * BS:(i + 1) * BS] == new, "live disk lost write %d" % i
print("snapshot consistent: %d new, %d old blocks" % (new_n, old_n))
PY

# A write to the snapshot export is refused with EPERM.
python3 - "$SOCK" "disk@$UUID" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
def rd(n):
    d = b""
    while len(d) < n:
        c = s.recv(n - len(d)); assert c
        d += c
    return d
name = sys.argv[2].encode()
rd(18); s.sendall(struct.pack(">I", 3) + struct.pack(">QII", 0x49484156454F5054, 1, len(name)) + name)
size, flags = struct.unpack(">QH", rd(10))
assert flags & 2, "READ_ONLY flag"
s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 1, 5, 0, 512) + b"x" * 512)
assert struct.unpack(">IIQ", rd(16)) == (0x67446698, 1, 5), "write to snapshot must give EPERM"
PY

# A second, read-only server for the snapshot alone, beside the live one.
$PLOOP_NBD --snapshot "$UUID" -U "$TMP/snap.sock" "$TMP/disk" 2>"$TMP/snap.log" &
SNPID=$!
for _ in $(seq 50); do [[ -S $TMP/snap.sock ]] && break; sleep 0.1; done
RU="nbd+unix:///?socket=$TMP/snap.sock"
[[ $(nbdinfo --json "$RU" | python3 -c 'import json,sys; print(json.load(sys.stdin)["exports"][0]["is_read_only"])') == True ]] ||
  fail "--snapshot server not read-only: $(cat "$TMP/snap.log")"
nbdcopy "$RU" "$TMP/snap2.raw"
cmp "$TMP/snap.raw" "$TMP/snap2.raw" || fail "--snapshot server serves other data"
kill $SNPID
wait $SNPID || fail "--snapshot server exit status"
mkdir -p "$TMP/other"
$PLOOP init -t none -s 16M "$TMP/other/root.hds" >/dev/null
expect_fail $PLOOP_NBD --snapshot "$UUID" -U "$TMP/x.sock" "$TMP/disk" "$TMP/other" >/dev/null

# A bare export is a running device too: snapshot-switch is refused as
# OpenVZ refuses it (its NBD clients would see the blocks change), exit 17.
rc=0
err=$($PLOOP snapshot-switch -u "$UUID" "$TMP/disk" 2>&1) || rc=$?
[[ $rc -eq 17 ]] || fail "snapshot-switch of a served disk exited $rc: $err"
grep -q "switch to snapshot operation on running device (served by ploop-nbd)" <<<"$err" ||
  fail "snapshot-switch of a served disk says: $err"
# compact of a bare export: no filesystem to trim, the daemon compacts.
out=$($PLOOP compact "$TMP/disk") || fail "compact of a served disk: $out"
grep -q "^$TMP/disk: 0 bytes trimmed, [0-9]* bytes reclaimed" <<<"$out" || fail "compact of a served disk says: $out"

# ---- INFO, merge refused while the snapshot is exported ----------------
info=$($PLOOP_NBD --ctl "$TMP/disk" INFO)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["snapshots"][0]["guid"]==sys.argv[2] and d["depth"]==2, d' "$info" "$GUID" ||
  fail "INFO: $info"
python3 - "$SOCK" "disk@$UUID" "$PLOOP_NBD" "$TMP/disk" <<'PY' || fail "merge while a snapshot is exported"
import socket, struct, subprocess, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
name = sys.argv[2].encode()
s.recv(18); s.sendall(struct.pack(">I", 3) + struct.pack(">QII", 0x49484156454F5054, 1, len(name)) + name)
s.recv(10)
r = subprocess.run([sys.argv[3], "--ctl", sys.argv[4], "MERGE"], capture_output=True, text=True)
assert r.returncode != 0 and "exported" in r.stderr, r
PY
# Merge while a client rewrites the whole disk: no write may be lost.
head -c 128M /dev/urandom >"$TMP/gen2.raw"
nbdcopy --flush --request-size=262144 "$TMP/gen2.raw" "$U" &
CPID=$!
sleep 0.1
$PLOOP_NBD --ctl "$TMP/disk" MERGE >/dev/null || fail "online merge"
wait $CPID || fail "nbdcopy during the merge"
nbdinfo --list "$U" | grep -q "@" && fail "merged snapshot still listed"
nbdcopy "$U" "$TMP/merged.raw"
cmp "$TMP/gen2.raw" "$TMP/merged.raw" || fail "writes lost or data changed by the online merge"

# Snapshot while nbdcopy overwrites the disk: every 256 KiB request of the
# copy is wholly in the snapshot or wholly absent, and the image is clean.
head -c 128M /dev/urandom >"$TMP/gen3.raw"
nbdcopy --flush --request-size=262144 "$TMP/gen3.raw" "$U" &
CPID=$!
sleep 0.1
G3=$($PLOOP_NBD --ctl "$TMP/disk" SNAPSHOT) || fail "snapshot during nbdcopy"
wait $CPID || fail "nbdcopy during the snapshot"
U3=${G3#\{}
U3=${U3%\}}
nbdcopy "nbd+unix:///disk@$U3?socket=$SOCK" "$TMP/snap3.raw"
python3 - "$TMP/gen2.raw" "$TMP/gen3.raw" "$TMP/snap3.raw" <<'PY' || fail "snapshot during nbdcopy is torn"
import sys
old, new, snap = (open(f, "rb").read() for f in sys.argv[1:])
CH = 262144
kinds = []
for i in range(0, len(snap), CH):
    s = snap[i:i + CH]
    assert s in (old[i:i + CH], new[i:i + CH]), "chunk at %d is neither before nor after" % i
    kinds.append(s == new[i:i + CH])
print("snapshot during nbdcopy: %d of %d chunks new" % (sum(kinds), len(kinds)))
PY
nbdcopy "$U" "$TMP/live3.raw"
cmp "$TMP/gen3.raw" "$TMP/live3.raw" || fail "live disk after the snapshot during nbdcopy"
$PLOOP_NBD --ctl "$TMP/disk" MERGE >/dev/null || fail "merge after the snapshot during nbdcopy"

# ---- dirty tracking ----------------------------------------------------
$PLOOP_NBD --ctl "$TMP/disk" DIRTY START >/dev/null
qemu-io -f raw -c 'write 5M 4k' -c 'write 70M 2M' -c 'write -z 100M 512' "$U" >/dev/null
# The same over NBD, as meta context ploop:dirty (status 1 = changed).
changed=$(nbdinfo --map=ploop:dirty "$U" | awk '$3 == 1 {printf "%s+%s ", $1, $2}')
[[ $changed == "5242880+1048576 73400320+2097152 104857600+1048576 " ]] ||
  fail "ploop:dirty map: $changed"
dirty=$($PLOOP_NBD --ctl "$TMP/disk" DIRTY GET CLEAR | tr '\n' ' ')
[[ $dirty == "cluster_size 1048576 5 70 71 100 " ]] || fail "dirty clusters: $dirty"
dirty=$($PLOOP_NBD --ctl "$TMP/disk" DIRTY GET | tr '\n' ' ')
[[ $dirty == "cluster_size 1048576 " ]] || fail "dirty after clear: $dirty"
$PLOOP_NBD --ctl "$TMP/disk" DIRTY STOP >/dev/null
nbdinfo --list --json "$U" | grep -q '"ploop:dirty"' && fail "ploop:dirty offered without tracking"

# ---- compaction: trimmed clusters come back -----------------------------
qemu-io -f raw -c 'discard 0 64M' "$U" >/dev/null
rec=$($PLOOP_NBD --ctl "$TMP/disk" COMPACT) || fail "COMPACT"
[[ $rec =~ ^[0-9]+$ ]] || fail "COMPACT reply: $rec"

# ---- online resize: new connections see the new size -------------------
[[ $($PLOOP_NBD --ctl "$TMP/disk" RESIZE 268435456) == 268435456 ]] || fail "online grow"
[[ $(nbdinfo --size "$U") == 268435456 ]] || fail "size after online grow"
qemu-io -f raw -c 'write -P 0x77 200M 1M' -c 'read -P 0x77 200M 1M' "$U" | grep -q '^read' ||
  fail "write into the grown area"
out=$($PLOOP_NBD --ctl "$TMP/disk" RESIZE abc 2>&1) && fail "RESIZE abc accepted"
[[ $(grep -c . <<<"$out") == 1 ]] || fail "RESIZE error is not one line: $out"

kill $SPID
wait $SPID || fail "server exit status"
[[ ! -e $CTL_SOCK ]] || fail "control socket left behind"
$PLOOP check "$TMP/disk" >/dev/null || fail "image not clean after the online operations"

# ---- --fuse: the live disk as a file, following an online resize -------
if [[ -c /dev/fuse ]] && command -v fusermount3 >/dev/null; then
  mkdir -p "$TMP/mnt"
  $PLOOP_NBD --fuse "$TMP/mnt" --fuse-name disk.img -U "$SOCK" "$TMP/disk" 2>"$TMP/fuse.log" &
  SPID=$!
  for _ in $(seq 50); do [[ -e $TMP/mnt/disk.img ]] && break; sleep 0.1; done
  [[ -e $TMP/mnt/disk.img ]] || fail "FUSE export: $(cat "$TMP/fuse.log")"
  cmp -n 1048576 <(dd if="$TMP/mnt/disk.img" bs=1M skip=200 count=1 status=none) \
    <(head -c 1M /dev/zero | tr '\0' '\167') || fail "FUSE file content"
  $PLOOP_NBD --ctl "$TMP/disk" RESIZE 320M >/dev/null
  [[ $(stat -c %s "$TMP/mnt/disk.img") == 335544320 ]] || fail "FUSE file size after online resize"
  kill $SPID
  wait $SPID || fail "server with --fuse exit status"
  mountpoint -q "$TMP/mnt" && fail "FUSE mount left behind"
  $PLOOP check "$TMP/disk" >/dev/null || fail "image not clean after the FUSE export"
fi
echo PASS
