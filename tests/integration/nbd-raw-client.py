#!/usr/bin/env python3
"""A bare NBD client (fixed newstyle, NBD_OPT_GO, simple replies) for the
tests that need a client no library would be: one that never reads its
replies, one that sits idle, one that works slowly.

  nbd-raw-client.py slow ADDR NCONN NREQ SIZE SECONDS
      NCONN connections each pipeline NREQ reads of SIZE bytes and never read
      a reply; prints how many requests each got out, then holds the
      connections open for SECONDS.
  nbd-raw-client.py idle ADDR SECONDS
      Connects and sends nothing; prints after how many seconds the server
      closed the connection, or "open" if it had not within SECONDS.
  nbd-raw-client.py busy ADDR PERIOD SECONDS
      Reads 4 KiB every PERIOD seconds for SECONDS; fails unless every reply
      came back.
  nbd-raw-client.py read ADDR OFFSET SIZE FILE
      One read of SIZE bytes at OFFSET, compared with FILE's bytes there.

ADDR is a unix socket path or HOST:PORT.
"""
import os, socket, struct, sys, time

NBDMAGIC, IHAVEOPT, REPMAGIC = 0x4E42444D41474943, 0x49484156454F5054, 0x3E889045565A9
REQ_MAGIC, SIMPLE_MAGIC = 0x25609513, 0x67446698
OPT_GO, REP_ACK = 7, 1


def die(msg):
    print("nbd-raw-client: " + msg, file=sys.stderr)
    sys.exit(1)


def recvn(s, n):
    parts, got = [], 0
    while got < n:
        c = s.recv(min(n - got, 1 << 20))
        if not c:
            raise EOFError("server closed after %d of %d bytes" % (got, n))
        parts.append(c)
        got += len(c)
    return b"".join(parts)


def connect(addr, timeout=10):
    if ":" in addr and not addr.startswith("/"):
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=timeout)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(addr)
    magic, ver, _ = struct.unpack(">QQH", recvn(s, 18))
    if magic != NBDMAGIC or ver != IHAVEOPT:
        die("not a fixed newstyle server")
    s.sendall(struct.pack(">I", 3))  # FIXED_NEWSTYLE | NO_ZEROES
    data = struct.pack(">I", 0) + struct.pack(">H", 0)  # export "", no info requests
    s.sendall(struct.pack(">QII", IHAVEOPT, OPT_GO, len(data)) + data)
    size = None
    while True:
        magic, _, rep, ln = struct.unpack(">QIII", recvn(s, 20))
        body = recvn(s, ln)
        if magic != REPMAGIC:
            die("bad option reply magic")
        if rep & 0x80000000:
            die("NBD_OPT_GO refused: 0x%x %r" % (rep, body[4:]))
        if rep == 3 and struct.unpack(">H", body[:2])[0] == 0:  # INFO_EXPORT
            size = struct.unpack(">Q", body[2:10])[0]
        if rep == REP_ACK:
            return s, size


def request(cookie, offset, count, typ=0):
    return struct.pack(">IHHQQI", REQ_MAGIC, 0, typ, cookie, offset, count)


def read_reply(s, cookie, count):
    magic, err, ck = struct.unpack(">IIQ", recvn(s, 16))
    if magic != SIMPLE_MAGIC or ck != cookie:
        die("bad reply header")
    if err:
        die("read failed: error %d" % err)
    return recvn(s, count)


def slow(addr, nconn, nreq, size, seconds):
    conns = [connect(addr) for _ in range(nconn)]
    sent = []
    for s, disk in conns:
        s.settimeout(2)  # the server may stop reading us: that is the point
        span = max(1, (disk - size) // 4096)
        buf = b"".join(request(i, (i * 7919 % span) * 4096, size) for i in range(nreq))
        done = 0
        try:
            while done < len(buf):
                done += s.send(buf[done:])
        except socket.timeout:
            pass
        sent.append(done // 28)
    print("sent", " ".join(map(str, sent)), flush=True)
    time.sleep(seconds)


def idle(addr, seconds):
    s, _ = connect(addr)
    s.settimeout(seconds)
    start = time.monotonic()
    try:
        closed = s.recv(1) == b""
    except socket.timeout:
        closed = False
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    print("%.1f" % (time.monotonic() - start) if closed else "open", flush=True)


def busy(addr, period, seconds):
    s, _ = connect(addr)
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        s.sendall(request(n, 0, 4096))
        read_reply(s, n, 4096)
        n += 1
        time.sleep(period)
    print("served", n, flush=True)


def read(addr, offset, size, path):
    s, _ = connect(addr, timeout=60)
    s.sendall(request(1, offset, size))
    got = read_reply(s, 1, size)
    with open(path, "rb") as f:
        f.seek(offset)
        want = f.read(size)
    if got != want:
        die("%d bytes at %d differ from %s" % (size, offset, path))
    print("read ok", flush=True)


def main(argv):
    if len(argv) < 3:
        die("usage: see the top of this file")
    mode, addr, a = argv[1], argv[2], argv[3:]
    if mode == "slow" and len(a) == 4:
        slow(addr, int(a[0]), int(a[1]), int(a[2]), float(a[3]))
    elif mode == "idle" and len(a) == 1:
        idle(addr, float(a[0]))
    elif mode == "busy" and len(a) == 2:
        busy(addr, float(a[0]), float(a[1]))
    elif mode == "read" and len(a) == 3:
        read(addr, int(a[0]), int(a[1]), a[2])
    else:
        die("bad arguments (see the top of this file)")


if __name__ == "__main__":
    main(sys.argv)
