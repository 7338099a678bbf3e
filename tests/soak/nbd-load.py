#!/usr/bin/env python3
"""One NBD client of the soak: mixed, verified I/O on a region it owns alone.

  nbd-load.py ADDR CID REGION_OFF REGION_LEN SECONDS MAX_OPS MODEL_OUT
  nbd-load.py compare RAW REGION_LEN MODEL...

Connects to ADDR (HOST:PORT or a unix socket path), then until SECONDS have
passed or MAX_OPS requests were made: writes (4 KiB..1 MiB, some FUA), reads
checked against its model, flushes, trims and write-zeroes, pipelined up to 4
requests that never overlap. Every 4 KiB block holds a pattern it can
recompute: (block number, generation << 8 | CID) repeated, generation 0 being
zeros. At the end it reads its whole region back and checks it, writes the
model (one little-endian int32 generation per block) to MODEL_OUT for the
offline comparison, and prints one JSON line of figures. Exit 1 on any
mismatch or server error, with one line on stderr saying where.

`compare` checks a raw image of the whole disk (e.g. `ploop export` after the
server stopped) against the models: client i's region starts at i *
REGION_LEN, and every byte past the last region is zero.
"""
import array, json, os, random, socket, struct, sys, time

NBDMAGIC, IHAVEOPT, REPMAGIC = 0x4E42444D41474943, 0x49484156454F5054, 0x3E889045565A9
REQ_MAGIC, SIMPLE_MAGIC = 0x25609513, 0x67446698
OPT_GO, REP_ACK, REP_INFO = 7, 1, 3
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM, CMD_WZ = 0, 1, 2, 3, 4, 6
FLAG_FUA, FLAG_NO_HOLE = 1, 2
TF_FLUSH, TF_FUA, TF_TRIM, TF_WZ = 1 << 2, 1 << 3, 1 << 5, 1 << 6
BLK = 4096
MAX_BLOCKS = 256  # 1 MiB
QD = 4


def die(msg):
    print("nbd-load[%s]: %s" % (CID, msg), file=sys.stderr)
    sys.exit(1)


def recvn(s, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if not k:
            die("server closed the connection after %d of %d bytes" % (got, n))
        got += k
    return bytes(buf)


def connect(addr):
    if ":" in addr and not addr.startswith("/"):
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60)
        s.connect(addr)
    magic, ver, _ = struct.unpack(">QQH", recvn(s, 18))
    if magic != NBDMAGIC or ver != IHAVEOPT:
        die("not a fixed newstyle server")
    s.sendall(struct.pack(">I", 3))
    data = struct.pack(">IH", 0, 0)
    s.sendall(struct.pack(">QII", IHAVEOPT, OPT_GO, len(data)) + data)
    size = flags = None
    while True:
        magic, _, rep, ln = struct.unpack(">QIII", recvn(s, 20))
        body = recvn(s, ln) if ln else b""
        if magic != REPMAGIC:
            die("bad option reply magic")
        if rep == REP_ACK:
            break
        if rep == REP_INFO and struct.unpack(">H", body[:2])[0] == 0:
            size, flags = struct.unpack(">QH", body[2:12])
        elif rep & 0x80000000:
            die("NBD_OPT_GO refused (%#x)" % rep)
    if size is None:
        die("no export size")
    return s, size, flags


def pattern(blk, gen):
    if gen == 0:
        return bytes(BLK)
    return struct.pack("<QQ", blk, (gen << 8) | CID) * (BLK // 16)


def expected(model, first, n):
    return b"".join(pattern(first + i, model[first - FIRST + i]) for i in range(n))


def first_diff(got, want):
    for i in range(0, len(want), BLK):
        if got[i:i + BLK] != want[i:i + BLK]:
            return i
    return 0


def main():
    global CID, FIRST
    addr, CID = sys.argv[1], int(sys.argv[2])
    roff, rlen, secs, max_ops, model_out = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(
        sys.argv[6]), sys.argv[7]
    if roff % BLK or rlen % BLK or rlen < MAX_BLOCKS * BLK:
        die("region must be 4 KiB aligned and at least 1 MiB")
    FIRST, nblk = roff // BLK, rlen // BLK
    rng = random.Random(0x50A6 + CID)
    s, size, tflags = connect(addr)
    if roff + rlen > size:
        die("region past the end of the %d-byte export" % size)
    can_trim, can_wz, can_fua = bool(tflags & TF_TRIM), bool(tflags & TF_WZ), bool(tflags & TF_FUA)
    model = array.array("i", [0]) * nblk
    gen = 0
    ops = dict(write=0, read=0, flush=0, trim=0, zero=0)
    st = dict(bytes_written=0, bytes_verified=0, max_batch_ms=0, max_batch_at=0)
    cookie = 0
    start = time.monotonic()
    deadline = start + secs

    def pick_range():
        # Log-uniform sizes from 4 KiB to 1 MiB.
        n = min(MAX_BLOCKS, max(1, int(2 ** rng.uniform(0, 8.01))))
        return rng.randrange(0, nblk - n + 1), n

    def run_batch(batch):
        """batch: list of (cmd, flags, first_block, nblocks, payload_or_None)."""
        nonlocal cookie
        pending = {}
        out = []
        for cmd, flags, b0, n, payload in batch:
            cookie += 1
            pending[cookie] = (cmd, b0, n)
            hdr = struct.pack(">IHHQQI", REQ_MAGIC, flags, cmd, cookie, (FIRST + b0) * BLK if n else 0, n * BLK)
            out.append(hdr + payload if payload else hdr)
        t = time.monotonic()
        s.sendall(b"".join(out))
        results = {}
        while pending:
            magic, err, ck = struct.unpack(">IIQ", recvn(s, 16))
            if magic != SIMPLE_MAGIC or ck not in pending:
                die("bad reply (magic %#x cookie %d)" % (magic, ck))
            cmd, b0, n = pending.pop(ck)
            if err:
                die("server error %d for command %d at block %d+%d" % (err, cmd, FIRST + b0, n))
            if cmd == CMD_READ:
                results[ck] = recvn(s, n * BLK)
        ms = int((time.monotonic() - t) * 1000)
        if ms > st["max_batch_ms"]:
            st["max_batch_ms"], st["max_batch_at"] = ms, int(t - start)
        return results

    while time.monotonic() < deadline and sum(ops.values()) < max_ops:
        batch, busy, reads = [], [], []
        for _ in range(rng.randint(1, QD)):
            b0, n = pick_range()
            if any(b0 < e and s0 < b0 + n for s0, e in busy):
                continue  # never two requests in flight on the same blocks
            r = rng.random()
            if r < 0.42:
                gen += 1
                for i in range(n):
                    model[b0 + i] = gen
                payload = b"".join(pattern(FIRST + b0 + i, gen) for i in range(n))
                fl = FLAG_FUA if can_fua and rng.random() < 0.1 else 0
                batch.append((CMD_WRITE, fl, b0, n, payload))
                ops["write"] += 1
                st["bytes_written"] += n * BLK
            elif r < 0.82:
                reads.append((cookie + len(batch) + 1, b0, n, expected(model, FIRST + b0, n)))
                batch.append((CMD_READ, 0, b0, n, None))
                ops["read"] += 1
            elif r < 0.88:
                batch.append((CMD_FLUSH, 0, 0, 0, None))
                ops["flush"] += 1
                continue
            elif r < 0.94 and can_trim:
                for i in range(n):
                    model[b0 + i] = 0  # ploop's discard reads back as zeros
                batch.append((CMD_TRIM, 0, b0, n, None))
                ops["trim"] += 1
            elif can_wz:
                for i in range(n):
                    model[b0 + i] = 0
                fl = (FLAG_NO_HOLE if rng.random() < 0.5 else 0) | (FLAG_FUA if rng.random() < 0.2 else 0)
                batch.append((CMD_WZ, fl, b0, n, None))
                ops["zero"] += 1
            busy.append((b0, b0 + n))
        if not batch:
            continue
        got = run_batch(batch)
        for ck, b0, n, want in reads:
            if got[ck] != want:
                off = first_diff(got[ck], want)
                die("read mismatch at byte %d (block %d)" % ((FIRST + b0) * BLK + off, FIRST + b0 + off // BLK))
            st["bytes_verified"] += n * BLK

    # The whole region, read back and checked, 1 MiB at a time.
    for b0 in range(0, nblk, MAX_BLOCKS):
        n = min(MAX_BLOCKS, nblk - b0)
        ck = cookie + 1
        got = run_batch([(CMD_READ, 0, b0, n, None)])[ck]
        want = expected(model, FIRST + b0, n)
        if got != want:
            off = first_diff(got, want)
            die("final read mismatch at byte %d" % ((FIRST + b0) * BLK + off))
        st["bytes_verified"] += n * BLK
    run_batch([(CMD_FLUSH, 0, 0, 0, None)])
    s.sendall(struct.pack(">IHHQQI", REQ_MAGIC, 0, CMD_DISC, 0, 0, 0))
    s.close()
    with open(model_out, "wb") as f:
        model.tofile(f)
    print(json.dumps(dict(cid=CID, ops=sum(ops.values()), **ops, **st)))


def compare():
    global CID
    raw, rlen, models = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    checked = 0
    with open(raw, "rb") as f:
        for i, path in enumerate(models):
            CID = i
            model = array.array("i")
            with open(path, "rb") as m:
                model.frombytes(m.read())
            if len(model) * BLK != rlen:
                die("model %s has %d blocks, expected %d" % (path, len(model), rlen // BLK))
            first = i * rlen // BLK
            f.seek(i * rlen)
            for b in range(len(model)):
                if f.read(BLK) != pattern(first + b, model[b]):
                    die("image differs from the model at byte %d" % ((first + b) * BLK))
            checked += rlen
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            if chunk.count(0) != len(chunk):
                die("image not zero past the regions at byte %d" % (f.tell() - len(chunk)))
            checked += len(chunk)
    print(checked)


if __name__ == "__main__":
    CID, FIRST = 0, 0
    compare() if sys.argv[1] == "compare" else main()
