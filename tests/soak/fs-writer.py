#!/usr/bin/env python3
"""The file writer of the soak, on a mounted ploop disk.

  fs-writer.py write DIR SECONDS MAX_OPS STATE_OUT
  fs-writer.py verify DIR STATE

`write` keeps up to 24 files in DIR: each step writes one (4 KiB..4 MiB of a
pattern seeded by its name and generation), fsyncs it, drops its pages from
the cache and reads it back from the disk, or deletes one, until SECONDS have
passed or MAX_OPS steps were made. It writes the expected state (name ->
generation, size) to STATE_OUT and prints one JSON line of figures. `verify`
checks every file of STATE (and that DIR holds no other), e.g. after a
remount. Exit 1 with one line on stderr at the first difference.
"""
import hashlib, json, os, random, sys, time

NFILES = 24


def die(msg):
    print("fs-writer: " + msg, file=sys.stderr)
    sys.exit(1)


def content(name, gen, size):
    seed = hashlib.sha256(("%s/%d" % (name, gen)).encode()).digest()
    block = seed * (65536 // len(seed))
    return (block * (size // len(block) + 1))[:size]


def read_uncached(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        parts = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            parts.append(b)
        return b"".join(parts)
    finally:
        os.close(fd)


def write():
    d, secs, max_ops, state_out = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    rng = random.Random(0xF11E)
    state, st = {}, dict(files_written=0, files_deleted=0, bytes_written=0, bytes_verified=0)
    gen, ops = 0, 0
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline and ops < max_ops:
        ops += 1
        name = "f%02d" % rng.randrange(NFILES)
        path = os.path.join(d, name)
        if name in state and rng.random() < 0.15:
            os.unlink(path)
            del state[name]
            st["files_deleted"] += 1
            continue
        gen += 1
        size = int(2 ** rng.uniform(12, 22)) + rng.randrange(512)
        data = content(name, gen, size)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        os.rename(tmp, path)
        state[name] = (gen, size)
        st["files_written"] += 1
        st["bytes_written"] += size
        if read_uncached(path) != data:
            die("%s (generation %d) reads back different right after it was written" % (name, gen))
        st["bytes_verified"] += size
    dfd = os.open(d, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    with open(state_out, "w") as f:
        json.dump(state, f)
    st["ops"] = ops
    print(json.dumps(st))


def verify():
    d, state = sys.argv[2], json.load(open(sys.argv[3]))
    names = sorted(n for n in os.listdir(d) if n != "lost+found")
    if names != sorted(state):
        die("files %s, expected %s" % (names, sorted(state)))
    total = 0
    for name, (gen, size) in state.items():
        if read_uncached(os.path.join(d, name)) != content(name, gen, size):
            die("%s differs from generation %d" % (name, gen))
        total += size
    print(total)


if __name__ == "__main__":
    {"write": write, "verify": verify}[sys.argv[1]]()
