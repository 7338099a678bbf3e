#!/usr/bin/env bash
# ploop-nbd driven by real NBD clients: nbdinfo (list, size, flags, --map for
# both meta contexts), nbdcopy both ways, qemu-img compare/convert, qemu-io
# FUA/flush/trim/zero requests, TCP, socket activation (captive syntax),
# stdin/stdout mode, and daemon mode with a pid file.
. "$(dirname "$0")/functions.sh"
requires nbdinfo
requires nbdcopy
requires qemu-img
requires qemu-io
requires python3
[[ -x $PLOOP && -x $PLOOP_NBD ]] || skip "ploop / ploop-nbd not built"

mkdir -p "$TMP/disk" "$TMP/other"
$PLOOP init -t none -s 256M "$TMP/disk/root.hds" >/dev/null
$PLOOP init -t none -s 64M "$TMP/other/root.hds" >/dev/null
# Source: 8 MiB of data, a 100 MiB hole, 3 MiB of data, a hole to the end.
head -c 8M /dev/urandom >"$TMP/src.raw"
truncate -s 256M "$TMP/src.raw"
dd if=/dev/urandom of="$TMP/src.raw" bs=1M count=3 seek=108 conv=notrunc status=none

SOCK=$TMP/nbd.sock
$PLOOP_NBD -U "$SOCK" "$TMP/disk" second="$TMP/other" 2>"$TMP/server.log" &
SPID=$!
cleanup "kill $SPID 2>/dev/null; wait $SPID 2>/dev/null"
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || fail "server did not start: $(cat "$TMP/server.log")"
U="nbd+unix:///?socket=$SOCK"

# ---- nbdinfo: exports, size, flags ----------------------------------
list=$(nbdinfo --list --json "$U")
names=$(python3 -c 'import json,sys; print(" ".join(sorted(e["export-name"] for e in json.load(sys.stdin)["exports"])))' <<<"$list")
[[ $names == "disk second" ]] || fail "export list: '$names'"
info=$(nbdinfo --json "$U")
py() { python3 -c "import json,sys; d=json.load(sys.stdin)['exports'][0]; print($1)" <<<"$info"; }
[[ $(py 'd["export-size"]') == 268435456 ]] || fail "size of the default export"
[[ $(py 'd["export-name"]') == disk ]] || fail "default export is the first disk"
for f in can_flush can_fua can_trim can_zero can_fast_zero can_multi_conn can_cache can_df; do
  [[ $(py "d['$f']") == True ]] || fail "$f not advertised"
done
[[ $(py 'd["is_read_only"]') == False ]] || fail "live disk advertised read-only"
[[ $(py 'd["block_size_minimum"]') == 512 && $(py 'd["block_size_maximum"]') == 33554432 ]] ||
  fail "block sizes"
[[ $(nbdinfo --size "nbd+unix:///second?socket=$SOCK") == 67108864 ]] || fail "size of export 'second'"
nbdinfo "nbd+unix:///nope?socket=$SOCK" >/dev/null 2>&1 && fail "unknown export accepted"

# ---- nbdcopy both ways ----------------------------------------------
nbdcopy --flush "$TMP/src.raw" "$U"
nbdcopy "$U" "$TMP/back.raw"
cmp "$TMP/src.raw" "$TMP/back.raw" || fail "nbdcopy round trip differs"
nbdcopy -C 4 -R 32 "$U" "$TMP/back4.raw"
cmp "$TMP/src.raw" "$TMP/back4.raw" || fail "nbdcopy with 4 connections differs"

# ---- block status: holes where nothing was written, depth 1 elsewhere
map=$(nbdinfo --map "$U")
grep -qE '^ +0 +8388608 +0 +data' <<<"$map" || fail "map: first 8 MiB not data: $map"
grep -qE '^ +8388608 +[0-9]+ +3 +hole,zero' <<<"$map" || fail "map: no hole after 8 MiB: $map"
depth=$(nbdinfo --map=ploop:allocation-depth "$U")
grep -qE '^ +0 +8388608 +1' <<<"$depth" || fail "allocation depth of written data: $depth"
grep -qE '^ +8388608 +[0-9]+ +0' <<<"$depth" || fail "allocation depth of a hole: $depth"

# ---- qemu-img on nbd+unix:// URIs -----------------------------------
qemu-img compare -f raw -F raw "$TMP/src.raw" "$U" >/dev/null || fail "qemu-img compare"
qemu-img convert -f raw -O raw "$U" "$TMP/conv.raw"
cmp "$TMP/src.raw" "$TMP/conv.raw" || fail "qemu-img convert from nbd differs"
qemu-img convert -n -f raw -O raw "$TMP/src.raw" "nbd+unix:///second?socket=$SOCK" 2>/dev/null &&
  fail "convert of a 256M image into a 64M export should fail"
head -c 64M "$TMP/src.raw" >"$TMP/small.raw"
qemu-img convert -n -W -m 8 -f raw -O raw "$TMP/small.raw" "nbd+unix:///second?socket=$SOCK"
qemu-img compare -f raw -F raw "$TMP/small.raw" "nbd+unix:///second?socket=$SOCK" >/dev/null ||
  fail "qemu-img convert into export 'second'"

# ---- qemu-io: FUA write, flush, zero (with and without holes), trim --
out=$(qemu-io -f raw \
  -c 'write -f -P 0xab 1M 64k' -c 'flush' -c 'read -P 0xab 1M 64k' \
  -c 'write -z 2M 1M' -c 'read -P 0 2M 1M' \
  -c 'write -z -u 3M 1M' -c 'read -P 0 3M 1M' \
  -c 'discard 4M 1M' -c 'read -P 0 4M 1M' \
  -c 'write -P 0x5a 250M 1M' -c 'read -P 0x5a 250M 1M' "$U" 2>&1)
grep -q 'verification failed\|error\|failed' <<<"$out" && fail "qemu-io: $out"
[[ $(grep -c '^read ' <<<"$out") == 5 ]] || fail "qemu-io reads: $out"
# Writes past the end are refused, not wrapped or truncated.
out=$(qemu-io -f raw -c 'write 256M 512' "$U" 2>&1) || true
grep -q 'write failed' <<<"$out" || fail "write past the end accepted: $out"

# ---- TCP, loopback by default ---------------------------------------
PORT=$((20000 + RANDOM % 20000))
# The same disk is served (and locked) by the first server: refused.
rc=0
timeout 5 $PLOOP_NBD -p $PORT "tcpdisk=$TMP/other" 2>"$TMP/tcp.log" || rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "second server on a served disk: rc=$rc"
[[ $(grep -c . "$TMP/tcp.log") == 1 ]] || fail "error for a disk in use: $(cat "$TMP/tcp.log")"
kill $SPID; wait $SPID || fail "server exit status on SIGTERM"
$PLOOP_NBD -p $PORT -P "$TMP/tcp.pid" "tcpdisk=$TMP/other" 2>"$TMP/tcp.log" &
TPID=$!
cleanup "kill $TPID 2>/dev/null"
for _ in $(seq 50); do [[ -s $TMP/tcp.pid ]] && break; sleep 0.1; done
[[ $(cat "$TMP/tcp.pid") == "$TPID" ]] || fail "pid file: $(cat "$TMP/tcp.pid" 2>/dev/null)"
[[ $(nbdinfo --size "nbd://127.0.0.1:$PORT/tcpdisk") == 67108864 ]] || fail "TCP export"
qemu-img compare -f raw -F raw "$TMP/small.raw" "nbd://127.0.0.1:$PORT/tcpdisk" >/dev/null ||
  fail "data over TCP"
kill $TPID; wait $TPID || fail "TCP server exit status"
[[ ! -e $TMP/tcp.pid ]] || fail "pid file left behind"

# ---- socket activation: libnbd's captive syntax ---------------------
[[ $(nbdinfo --size -- [ "$PLOOP_NBD" -s "$TMP/disk" ]) == 268435456 ]] || fail "socket activation"
nbdcopy -- [ "$PLOOP_NBD" "$TMP/disk" ] "$TMP/act.raw"
cmp <(head -c $((1024 * 1024 + 65536)) "$TMP/act.raw" | tail -c 64k) <(head -c 64k /dev/zero | tr '\0' '\253') ||
  fail "FUA write not visible after restart"

# ---- stdin/stdout: one client, then the server exits ----------------
python3 - "$PLOOP_NBD" "$TMP/disk" <<'PY'
import socket, struct, subprocess, sys
a, b = socket.socketpair()
p = subprocess.Popen([sys.argv[1], "-s", sys.argv[2]], stdin=b, stdout=b)
b.close()
def rd(n):
    d = b""
    while len(d) < n:
        c = a.recv(n - len(d)); assert c, "closed"
        d += c
    return d
assert struct.unpack(">QQH", rd(18))[:2] == (0x4e42444d41474943, 0x49484156454F5054)
a.sendall(struct.pack(">I", 3) + struct.pack(">QII", 0x49484156454F5054, 1, 0))
size, flags = struct.unpack(">QH", rd(10))
assert size == 256 << 20, size
a.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, 9, 1 << 20, 512))
magic, err, cookie = struct.unpack(">IIQ", rd(16))
assert (magic, err, cookie) == (0x67446698, 0, 9) and rd(512) == b"\xab" * 512
a.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 2, 0, 0, 0))  # DISC
assert p.wait(timeout=10) == 0, "stdio server exit status"
PY

# ---- daemon mode ----------------------------------------------------
# Started the way scripts do, reading its output to the end: returns at once.
out=$(timeout 20 $PLOOP_NBD -d -P "$TMP/d.pid" -U "$SOCK" "$TMP/disk" 2>&1) || fail "daemon start: $out"
DPID=$(cat "$TMP/d.pid")
cleanup "kill $DPID 2>/dev/null"
[[ $(nbdinfo --size "$U") == 268435456 ]] || fail "daemon serves"
expect_fail $PLOOP_NBD -d -P "$TMP/d2.pid" -U "$TMP/other.sock" "$TMP/disk" >/dev/null
kill "$DPID"
for _ in $(seq 50); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$DPID" 2>/dev/null && fail "daemon did not stop on SIGTERM"
[[ ! -e $SOCK ]] || fail "unix socket left behind"
$PLOOP check "$TMP/disk" >/dev/null || fail "disk not clean after daemon stop"
$PLOOP check "$TMP/other" >/dev/null || fail "other disk not clean"

# ---- usage errors: one line, non-zero -------------------------------
expect_fail $PLOOP_NBD "$TMP/disk" >/dev/null
expect_fail $PLOOP_NBD --bogus "$TMP/disk" >/dev/null
expect_fail $PLOOP_NBD -t 0 -U "$SOCK" "$TMP/disk" >/dev/null
expect_fail $PLOOP_NBD -U "$SOCK" "$TMP/nonexistent" >/dev/null
expect_fail $PLOOP_NBD -U "$SOCK" -p 1 "$TMP/disk" >/dev/null
expect_fail $PLOOP_NBD -U "$SOCK" a="$TMP/disk" a="$TMP/other" >/dev/null
echo PASS
