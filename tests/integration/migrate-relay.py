#!/usr/bin/env python3
"""TCP relay for the migration fault tests: forwards one connection from
LISTEN to TARGET (both ADDR:PORT) and flips one bit of the source->target
bytes: at byte OFFSET, or, with --trigger FILE, at OFFSET bytes after FILE
appears (so a test hook can aim at a phase). Serves one connection."""
import argparse, os, select, socket, sys

ap = argparse.ArgumentParser()
ap.add_argument('listen')
ap.add_argument('target')
ap.add_argument('offset', type=int)
ap.add_argument('--trigger')
a = ap.parse_args()

def addr(s):
    h, p = s.rsplit(':', 1)
    return h, int(p)

ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(addr(a.listen))
ls.listen(1)
print('relaying', flush=True)
ls.settimeout(60)
c, _ = ls.accept()
t = socket.create_connection(addr(a.target), timeout=10)
pos = 0          # source->target bytes forwarded
armed_at = None if a.trigger else 0
flipped = False
for _ in range(10**7):
    r, _, _ = select.select([c, t], [], [], 60)
    if not r:
        break
    if c in r:
        d = c.recv(65536)
        if not d:
            break
        if armed_at is None and os.path.exists(a.trigger):
            armed_at = pos
        if not flipped and armed_at is not None:
            at = armed_at + a.offset
            if pos <= at < pos + len(d):
                b = bytearray(d)
                b[at - pos] ^= 0x10
                d = bytes(b)
                flipped = True
                print('flipped byte', at, flush=True)
        pos += len(d)
        t.sendall(d)
    if t in r:
        d = t.recv(65536)
        if not d:
            # pass the half-close on and drain, so the source reads what
            # the receiver said before its end instead of a reset
            c.shutdown(socket.SHUT_WR)
            c.settimeout(2)
            try:
                while c.recv(65536):
                    pass
            except OSError:
                pass
            break
        c.sendall(d)
c.close()
t.close()
