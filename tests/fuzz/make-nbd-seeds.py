#!/usr/bin/env python3
"""Writes seed inputs for fuzz_nbd: what a client sends, from the first
client-flags word through options and requests (formats of
/work/shared/notes/nbd-protocol.md, the NBD protocol's newstyle)."""
import struct
import sys

OPTS = 0x49484156454F5054
REQ = 0x25609513


def opt(code, data=b""):
    return struct.pack(">QII", OPTS, code, len(data)) + data


def name_info(name, infos=()):
    n = name.encode()
    return struct.pack(">I", len(n)) + n + struct.pack(">H", len(infos)) + b"".join(
        struct.pack(">H", i) for i in infos)


def meta(name, queries):
    n = name.encode()
    out = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
    for q in queries:
        out += struct.pack(">I", len(q)) + q.encode()
    return out


def req(cmd, off=0, length=0, flags=0, cookie=1, payload=b""):
    return struct.pack(">IHHQQI", REQ, flags, cmd, cookie, off, length) + payload


def io_requests():
    return b"".join([
        req(1, 0, 512, payload=b"\xab" * 512),          # WRITE
        req(1, 40960, 1024, flags=1, payload=b"\xcd" * 1024),  # WRITE FUA, cluster 1
        req(0, 0, 512, cookie=2),                       # READ
        req(0, 32768 - 100, 200, cookie=3),             # READ across clusters
        req(5, 0, 65536, cookie=4),                     # CACHE
        req(3, cookie=5),                               # FLUSH
        req(4, 65536, 65536, cookie=6),                 # TRIM
        req(6, 131072, 4096, flags=2, cookie=7),        # WRITE_ZEROES NO_HOLE
        req(7, 0, 4 << 20, cookie=8),                   # BLOCK_STATUS
        req(0, (4 << 20) - 512, 1024, cookie=9),        # READ past the end
        req(2, cookie=10),                              # DISC
    ])


def main(out):
    flags = struct.pack(">I", 3)  # FIXED_NEWSTYLE | NO_ZEROES
    seeds = {
        "go": flags + opt(7, name_info("disk", (3, 1, 2))) + io_requests(),
        "export-name": struct.pack(">I", 1) + opt(1, b"disk") + io_requests(),
        "structured": flags + opt(8) + opt(9, meta("disk", [])) + opt(10, meta("disk", [
            "base:allocation", "ploop:allocation-depth", "ploop:dirty"])) + opt(7, name_info("disk")) +
        req(7, 0, 4 << 20, cookie=1) + req(7, 0, 65536, flags=8, cookie=2) + req(0, 0, 65536, flags=4, cookie=3) +
        req(2, cookie=4),
        "list-info-abort": flags + opt(3) + opt(6, name_info("")) + opt(6, name_info("nosuch")) + opt(4) +
        opt(5) + opt(11) + opt(2),
        "snapshot-ro": flags + opt(3) + opt(7, name_info("disk@11111111-2222-4333-8444-555555555555")) +
        opt(7, name_info("")) + req(1, 0, 512, payload=b"x" * 512) + req(0, 0, 4096) + req(2),
    }
    for name, data in seeds.items():
        with open(f"{out}/{name}", "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
