#!/usr/bin/env bash
# Hostile clients against ploop-nbd: malformed handshakes, bad options,
# unknown commands, out-of-range and oversized requests, truncated packets,
# disconnects mid-request, random garbage.  Each must get the protocol's
# error or a closed connection; a healthy client keeps being served
# throughout, and the image passes `ploop check` afterwards.
. "$(dirname "$0")/functions.sh"
requires python3
requires nbdcopy
[[ -x $PLOOP && -x $PLOOP_NBD ]] || skip "ploop / ploop-nbd not built"

mkdir -p "$TMP/disk"
$PLOOP init -t none -s 64M "$TMP/disk/root.hds" >/dev/null
head -c 8M /dev/urandom >"$TMP/seed.raw"
truncate -s 64M "$TMP/seed.raw"
export PLOOP_RUN_DIR=$TMP/run
SOCK=$TMP/nbd.sock
$PLOOP_NBD -U "$SOCK" "$TMP/disk" 2>"$TMP/server.log" &
SPID=$!
cleanup "kill $SPID 2>/dev/null; wait $SPID 2>/dev/null"
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || fail "server did not start: $(cat "$TMP/server.log")"
nbdcopy "$TMP/seed.raw" "nbd+unix:///?socket=$SOCK"

python3 - "$SOCK" "$($PLOOP_NBD --ctl-path "$TMP/disk")" <<'PY'
import os, random, socket, struct, sys, time

SOCK, CTL = sys.argv[1], sys.argv[2]
NBDMAGIC, IHAVEOPT, REPMAGIC = 0x4e42444d41474943, 0x49484156454F5054, 0x3e889045565a9
REQ, SIMPLE, STRUCT = 0x25609513, 0x67446698, 0x668e33ef
ERR_UNSUP, ERR_INVALID, ERR_UNKNOWN = 2**31 + 1, 2**31 + 3, 2**31 + 6
EPERM, EINVAL, ENOSPC, EOVERFLOW = 1, 22, 28, 75
SIZE = 64 << 20
checks = 0

def ok(cond, what):
    global checks
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)
    checks += 1

def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(SOCK)
    return s

def recvn(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("closed after %d of %d bytes" % (len(b), n))
        b += c
    return b

def closed(s):
    """True when the server closes the connection (EOF or reset) soon."""
    try:
        s.settimeout(5)
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False

def greet(s, flags=3):
    m, v, gf = struct.unpack(">QQH", recvn(s, 18))
    ok(m == NBDMAGIC and v == IHAVEOPT and gf & 1, "server greeting")
    s.sendall(struct.pack(">I", flags))

def opt(s, o, data=b""):
    s.sendall(struct.pack(">QII", IHAVEOPT, o, len(data)) + data)

def reply(s):
    magic, o, typ, ln = struct.unpack(">QIII", recvn(s, 20))
    ok(magic == REPMAGIC, "option reply magic")
    return o, typ, recvn(s, ln)

def final_reply(s):
    while True:
        o, typ, data = reply(s)
        if typ != 2 and typ != 3 and typ != 4:  # SERVER, INFO, META_CONTEXT
            return typ, data

def go(s, name=b"", sr=False, meta=()):
    if sr:
        opt(s, 8)
        ok(final_reply(s)[0] == 1, "structured reply ACK")
    if meta:
        q = b"".join(struct.pack(">I", len(m)) + m for m in meta)
        opt(s, 10, struct.pack(">I", len(name)) + name + struct.pack(">I", len(meta)) + q)
        ok(final_reply(s)[0] == 1, "set meta context ACK")
    opt(s, 7, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
    typ, _ = final_reply(s)
    ok(typ == 1, "GO ACK")

def request(s, typ, off=0, ln=0, flags=0, cookie=1, payload=b""):
    s.sendall(struct.pack(">IHHQQI", REQ, flags, typ, cookie, off, ln) + payload)

def simple(s):
    m, err, cookie = struct.unpack(">IIQ", recvn(s, 16))
    ok(m == SIMPLE, "simple reply magic")
    return err, cookie

def chunks(s):
    """Structured chunks of one reply: [(type, payload)], stops at DONE."""
    out = []
    while True:
        m, fl, typ, cookie, ln = struct.unpack(">IHHQI", recvn(s, 20))
        ok(m == STRUCT, "structured reply magic")
        out.append((typ, recvn(s, ln)))
        if fl & 1:
            return out

def transmission(sr=False, meta=()):
    s = conn()
    greet(s)
    go(s, sr=sr, meta=meta)
    return s

# A healthy connection stays open through everything below.
healthy = transmission()

def healthy_ok():
    request(healthy, 0, 4096, 4096, cookie=77)
    err, cookie = simple(healthy)
    ok(err == 0 and cookie == 77, "healthy client still served")
    recvn(healthy, 4096)

# ---- handshake phase ------------------------------------------------
s = conn(); greet(s, flags=0xFFFFFFFF); ok(closed(s), "unknown client flags drop the connection")
s = conn(); greet(s, flags=0); ok(closed(s), "non-fixed-newstyle client dropped")
s = conn(); recvn(s, 18); s.sendall(b"\x00\x00"); s.close()  # truncated client flags
s = conn(); greet(s); s.sendall(b"GARBAGE!" + b"\0" * 8); ok(closed(s), "bad option magic drops")
s = conn(); greet(s); opt(s, 0x1234, b"x" * 100)
ok(final_reply(s)[0] == ERR_UNSUP, "unknown option -> ERR_UNSUP")
opt(s, 5); ok(final_reply(s)[0] == ERR_UNSUP, "STARTTLS -> ERR_UNSUP (no TLS)")
opt(s, 3, b"junk"); ok(final_reply(s)[0] == ERR_INVALID, "LIST with data -> ERR_INVALID")
opt(s, 3); ok(final_reply(s)[0] == 1, "LIST still works after errors")
opt(s, 8, b"x"); ok(final_reply(s)[0] == ERR_INVALID, "STRUCTURED_REPLY with data -> ERR_INVALID")
opt(s, 10, struct.pack(">II", 0, 0)); ok(final_reply(s)[0] == ERR_INVALID, "SET_META before SR")
opt(s, 6, struct.pack(">I", 1000) + b"ab"); ok(final_reply(s)[0] == ERR_INVALID, "INFO bad name len")
opt(s, 6, struct.pack(">I", 2) + b"ab" + struct.pack(">H", 5)); ok(final_reply(s)[0] == ERR_INVALID, "INFO count mismatch")
opt(s, 7, struct.pack(">I", 4) + b"nope" + struct.pack(">H", 0)); ok(final_reply(s)[0] == ERR_UNKNOWN, "GO unknown export")
opt(s, 7, struct.pack(">I", 12) + b"disk@garbage" + struct.pack(">H", 0)); ok(final_reply(s)[0] == ERR_UNKNOWN, "GO bad snapshot name")
opt(s, 8); ok(final_reply(s)[0] == 1, "SR ACK")
opt(s, 8); ok(final_reply(s)[0] == ERR_INVALID, "second SR -> ERR_INVALID")
opt(s, 9, struct.pack(">I", 0) + b"" + struct.pack(">I", 3) + b"\0\0\0\x10ab")
ok(final_reply(s)[0] == ERR_INVALID, "LIST_META truncated query")
opt(s, 9, struct.pack(">II", 0, 1) + struct.pack(">I", 9) + b"qemu:junk")
ok(final_reply(s)[0] == 1, "unknown meta namespace ignored")
opt(s, 2); ok(final_reply(s)[0] == 1, "ABORT ACK"); ok(closed(s), "closed after ABORT")
s = conn(); greet(s); s.sendall(struct.pack(">QII", IHAVEOPT, 7, 0x7fffffff)); ok(closed(s), "huge option length drops")
s = conn(); greet(s); s.sendall(struct.pack(">QII", IHAVEOPT, 7, 100) + b"abc"); s.close()  # truncated option
s = conn(); greet(s); opt(s, 1, b"nope"); ok(closed(s), "EXPORT_NAME unknown drops")
s = conn(); greet(s, flags=3); opt(s, 1, b"")
ln = len(recvn(s, 10)); ok(ln == 10, "EXPORT_NAME reply without zeroes (NO_ZEROES)")
request(s, 0, 0, 512); ok(simple(s)[0] == 0, "read after EXPORT_NAME"); recvn(s, 512); s.close()
s = conn(); greet(s, flags=1); opt(s, 1, b"")
recvn(s, 134); request(s, 2); ok(closed(s), "DISC closes")
healthy_ok()

# ---- transmission: every bad request gets its error, stream stays in sync
s = transmission()
cases = [
    (dict(typ=99, off=0, ln=512), EINVAL, "unknown command"),
    (dict(typ=0, off=SIZE, ln=512), EINVAL, "read past the end"),
    (dict(typ=0, off=SIZE - 512, ln=1024), EINVAL, "read straddling the end"),
    (dict(typ=0, off=2**64 - 512, ln=1024), EINVAL, "offset+length overflow"),
    (dict(typ=0, off=0, ln=0), EINVAL, "zero-length read"),
    (dict(typ=0, off=0, ln=64 << 20), EOVERFLOW, "read larger than max payload"),
    (dict(typ=0, off=0, ln=512, flags=0x8000), EINVAL, "unknown command flag"),
    (dict(typ=0, off=0, ln=512, flags=2), EINVAL, "NO_HOLE on read"),
    (dict(typ=0, off=0, ln=512, flags=4), EINVAL, "DF without structured replies"),
    (dict(typ=4, off=0, ln=512, flags=8), EINVAL, "REQ_ONE on trim"),
    (dict(typ=7, off=0, ln=512), EINVAL, "block status without contexts"),
    (dict(typ=3, off=1, ln=0), EINVAL, "flush with an offset"),
    (dict(typ=6, off=SIZE, ln=512), ENOSPC, "zero past the end"),
    (dict(typ=4, off=2**63, ln=512), ENOSPC, "trim past the end"),
    (dict(typ=6, off=4096, ln=4096, flags=0x10), 95, "FAST_ZERO of a partial cluster -> ENOTSUP"),
    (dict(typ=6, off=32 << 20, ln=1 << 20, flags=0x10), 0, "FAST_ZERO of a whole cluster"),
]
for i, (kw, want, what) in enumerate(cases):
    request(s, cookie=1000 + i, **kw)
    err, cookie = simple(s)
    ok(err == want and cookie == 1000 + i, "%s -> %d (got %d)" % (what, want, err))
# A rejected write's payload is consumed, so the next request parses.
request(s, 1, SIZE, 4096, cookie=5, payload=b"w" * 4096)
ok(simple(s) == (ENOSPC, 5), "write past the end -> ENOSPC")
big = 33 << 20
request(s, 1, 0, big, cookie=6, payload=b"\0" * big)
ok(simple(s) == (EOVERFLOW, 6), "oversized write -> EOVERFLOW, payload skipped")
request(s, 1, 0, 512, flags=2, cookie=7, payload=b"x" * 512)
ok(simple(s) == (EINVAL, 7), "NO_HOLE on write -> EINVAL")
request(s, 0, 0, 512, cookie=8); ok(simple(s) == (0, 8), "stream in sync after rejects"); recvn(s, 512)
# Many requests in flight: every cookie answered exactly once, data right.
for i in range(64):
    request(s, 0, i * 65536, 65536, cookie=2000 + i)
seen = set()
for i in range(64):
    err, cookie = simple(s); ok(err == 0, "pipelined read ok")
    recvn(s, 65536); seen.add(cookie)
ok(seen == set(range(2000, 2064)), "all pipelined cookies answered")
request(s, 0xffff, 0, 0, flags=0xffff, cookie=9); ok(simple(s) == (EINVAL, 9), "all-ones request")
s.sendall(struct.pack(">IHHQQI", 0xdeadbeef, 0, 0, 1, 0, 512)); ok(closed(s), "bad request magic drops")

# ---- structured replies: READ errors come as error chunks ------------
s = transmission(sr=True, meta=(b"base:allocation", b"ploop:allocation-depth"))
request(s, 0, SIZE, 512, cookie=3)
ch = chunks(s); ok(len(ch) == 1 and ch[0][0] == 2**15 + 1, "read past end -> ERROR chunk")
ok(struct.unpack(">I", ch[0][1][:4])[0] == EINVAL, "error chunk carries EINVAL")
request(s, 7, 0, SIZE, cookie=4)
ch = chunks(s); ok(len(ch) == 2 and all(t == 5 for t, _ in ch), "block status: one chunk per context")
ids = sorted(struct.unpack(">I", p[:4])[0] for _, p in ch); ok(ids == [1, 2], "context ids")
for _, p in ch:
    total = sum(struct.unpack(">I", p[4 + 8 * k:8 + 8 * k])[0] for k in range((len(p) - 4) // 8))
    ok(0 < total <= SIZE, "extents within the request")
request(s, 7, 0, SIZE, flags=8, cookie=5)
ch = chunks(s); ok(all(len(p) == 12 for _, p in ch), "REQ_ONE: exactly one extent per context")
request(s, 0, 32 << 20, 1 << 20, cookie=6)  # a hole of the thin image
ch = chunks(s); ok(ch[0][0] == 2 and struct.unpack(">QI", ch[0][1]) == (32 << 20, 1 << 20), "hole sent as OFFSET_HOLE")
request(s, 0, 32 << 20, 1 << 20, flags=4, cookie=7)
ch = chunks(s); ok(ch[0][0] == 1 and len(ch[0][1]) == 8 + (1 << 20), "DF: one data chunk")
s.close()

# ---- disconnects mid-request ----------------------------------------
for cut in (5, 27, 28 + 100):
    s = transmission()
    pkt = struct.pack(">IHHQQI", REQ, 0, 1, 1, 0, 4096) + b"z" * 4096
    s.sendall(pkt[:cut]); s.close()
s = transmission()
for i in range(16):
    request(s, 0, i * 4096, 4096, cookie=i)
s.close()  # leave with requests in flight
healthy_ok()

# ---- random garbage at every stage ----------------------------------
rng = random.Random(1234)
for i in range(150):
    s = conn()
    try:
        stage = i % 3
        if stage >= 1:
            greet(s)
        if stage == 2:
            go(s, sr=bool(i & 4))
        blob = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300)))
        if stage == 2 and i & 8:  # a plausible header with random fields
            blob = struct.pack(">IHHQQI", REQ, rng.getrandbits(16), rng.getrandbits(16),
                               i, rng.getrandbits(64), rng.getrandbits(32) & 0xffff) + blob[:64]
        s.sendall(blob)
        if i % 2:
            s.shutdown(socket.SHUT_WR)
            closed(s)
    except (EOFError, ConnectionResetError, BrokenPipeError, socket.timeout):
        pass
    finally:
        s.close()
healthy_ok()

# ---- a flood of idle connections: refused past the limit, served after --
flood = []
for i in range(300):
    try:
        flood.append(conn())
    except OSError:
        break
healthy_ok()
for f in flood:
    f.close()
for attempt in range(100):  # the server notices the closed sockets asynchronously
    try:
        s = transmission()
        break
    # BlockingIOError: the listen backlog is still full of the flood's sockets
    except (EOFError, ConnectionResetError, BrokenPipeError, BlockingIOError):
        time.sleep(0.1)
request(s, 0, 0, 512, cookie=1); ok(simple(s) == (0, 1), "served after the flood"); s.close()
# ---- the control socket: garbage, overlong lines, bad arguments ----------
def ctl(lines, raw=None):
    c = socket.socket(socket.AF_UNIX); c.settimeout(10); c.connect(CTL)
    f = c.makefile("rwb")
    ok(f.readline().startswith(b"ploop-nbd 1 "), "control greeting")
    out = []
    if raw is not None:
        c.sendall(raw)
        out.append(f.readline())
    for l in lines:
        f.write(l + b"\n"); f.flush()
        out.append(f.readline())
    c.close()
    return out
for bad in (b"", b"NOPE", b"RESIZE", b"RESIZE -5", b"RESIZE 99999999999999999999", b"DIRTY",
            b"DIRTY GET", b"MERGE {not-a-uuid}", b"SNAPSHOT x\x00y", b"\xff\xfe" * 50):
    r = ctl([bad])[0]
    ok(r.startswith(b"ERR ") and r.endswith(b"\n"), "control %r -> ERR (got %r)" % (bad[:20], r))
r = ctl([], raw=b"A" * 10000)[0]
ok(r.startswith(b"ERR "), "overlong control line -> ERR")
ok(ctl([b"INFO"])[0].startswith(b"OK {"), "control still answers")
healthy_ok()
request(healthy, 2); ok(closed(healthy), "healthy client disconnects cleanly")
print("fuzz: %d checks passed" % checks)
PY

# The server survived and still serves a real client correctly.
kill -0 $SPID || fail "server died: $(tail -5 "$TMP/server.log")"
nbdcopy "nbd+unix:///?socket=$SOCK" "$TMP/out.raw"
cmp "$TMP/seed.raw" "$TMP/out.raw" || fail "data changed by hostile clients"
kill $SPID
wait $SPID || fail "server did not stop cleanly on SIGTERM"
$PLOOP check "$TMP/disk" || fail "image fails ploop check after the fuzzing"
echo "PASS"
