#!/usr/bin/env python3
"""Test helper for the ploop CLI tests: makes model raw files, scribbles on
them, and reads or patches delta headers and BAT slots (little-endian,
64-byte header, BAT slot for cluster i at byte 64 + 4*i)."""
import json
import os
import random
import struct
import sys

MiB = 1 << 20
HEADER = struct.Struct("<16s5IQ3IQ")  # the 64-byte header, field by field (FIELDS)
FIELDS = ("signature", "type", "heads", "cylinders", "cluster_sectors", "bat_entries",
          "size_sectors", "in_use", "first_block", "flags", "ext_offset")


def mkraw(path, size, seed, hole_every=5):
    """Random data with holes: every HOLE_EVERY-th MiB is zero, and every
    other MiB has a zeroed 64 KiB run, so zero detection is exercised both
    on whole clusters and within clusters."""
    rnd = random.Random(int(seed))
    size = int(size)
    hole_every = int(hole_every)
    with open(path, "wb") as f:
        off = 0
        i = 0
        while off < size:
            n = min(MiB, size - off)
            if hole_every and i % hole_every == hole_every - 1:
                f.seek(off + n)
                f.truncate(off + n)
            else:
                data = bytearray(rnd.randbytes(n))
                if i % 2 and n > 128 * 1024:
                    z = rnd.randrange(0, n - 65536) & ~511
                    data[z:z + 65536] = bytes(65536)
                f.write(data)
            off += n
            i += 1
        f.truncate(size)


def scribble(path, seed, count):
    """COUNT random writes (sector-aligned or not), some of them zeroes."""
    rnd = random.Random(int(seed))
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        for _ in range(int(count)):
            length = rnd.choice([512, 4096, 65536, 300000, MiB, 3 * MiB + 17])
            length = min(length, size)
            off = rnd.randrange(0, size - length + 1)
            f.seek(off)
            f.write(bytes(length) if rnd.random() < 0.2 else rnd.randbytes(length))


def header(path):
    with open(path, "rb") as f:
        raw = f.read(HEADER.size)
    vals = list(HEADER.unpack(raw))
    vals[0] = vals[0].decode("latin-1")
    print(json.dumps(dict(zip(FIELDS, vals))))


def poke(path, offset, fmt, value):
    """Writes VALUE packed as struct FMT (little-endian) at OFFSET."""
    with open(path, "r+b") as f:
        f.seek(int(offset, 0))
        if fmt == "bytes":
            f.write(value.encode("latin-1"))
        else:
            f.write(struct.pack("<" + fmt, int(value, 0)))


def bat_get(path, index):
    with open(path, "rb") as f:
        f.seek(64 + 4 * int(index))
        print(struct.unpack("<I", f.read(4))[0])


def bat_set(path, index, value):
    poke(path, str(64 + 4 * int(index)), "I", value)


def first_allocated(path, skip=0):
    """Index of the first (after SKIP) allocated BAT slot, and its entry."""
    with open(path, "rb") as f:
        h = HEADER.unpack(f.read(HEADER.size))
        n = h[5]
        bat = f.read(4 * n)
    found = 0
    for i in range(n):
        (v,) = struct.unpack_from("<I", bat, 4 * i)
        if v:
            if found == int(skip):
                print(i, v)
                return
            found += 1
    sys.exit("no allocated slot")


COMMANDS = {"mkraw": mkraw, "scribble": scribble, "header": header, "poke": poke,
            "bat-get": bat_get, "bat-set": bat_set, "first-allocated": first_allocated}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit("usage: ploop-image-tool.py {%s} ARGS..." % ",".join(COMMANDS))
    COMMANDS[sys.argv[1]](*sys.argv[2:])
