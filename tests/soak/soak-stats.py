#!/usr/bin/env python3
"""The soak's figures and its resource rule.

  soak-stats.py sample SAMPLES T0 STOPFILE BUSYFILE MAXSECS PID1 PID2
  soak-stats.py SAMPLES OUTDIR NCLIENTS SECONDS FD0_SERVER FD1_SERVER FD0_MOUNT FD1_MOUNT

`sample` writes a line a second to SAMPLES, "T RSS_KB FDS RSS_KB FDS BUSY"
for the two processes (T in seconds since the epoch time T0; BUSY 1 while
BUSYFILE exists, i.e. an online snapshot or merge runs), until STOPFILE
exists or MAXSECS passed: one process, no fork per sample, so that a loaded
machine still gets its samples on time.

SAMPLES: from `sample`, for ploop-nbd and the mount's daemon. OUTDIR: the clients' JSON lines (client.N), the file
writer's (fs), "snaps merges" (snapshots) and "OP MS" lines (snapshot-ms),
"runs starts" (container).

The rule, for each daemon: the first 10% of the run (at least 20 s) is
warm-up and not judged (the mount daemon's FUSE ring buffers, 1 MiB per
entry, are touched as requests of growing sizes come); of the samples after it
up to SECONDS (the load's end; after it come the final reads and merges), the median RSS of the last
quarter must be within 10% + 8 MiB of the first quarter's. For ploop-nbd,
samples taken while an online snapshot or merge ran are left out: a merge
holds up to 64 MiB of copy buffers (MERGE_INFLIGHT_BYTES in copy.c) until it
ends, which is not growth. fd counts taken
at idle (no client connected, one delta) before and after the load must be
equal; during the load they move with clients and snapshot depth, so only
their range is printed. Exit 1 when the rule fails.
"""
import json, os, statistics, sys, time


def load_json(path):
    try:
        for line in open(path):
            if line.startswith("{"):
                return json.loads(line)
    except OSError:
        pass
    return None


def words(path):
    try:
        return open(path).read().split()
    except OSError:
        return []


def rss_fds(pid):
    try:
        rss = 0
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        return rss, len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0, 0


def sample():
    out, t0, stop, busy, maxsecs = sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5], float(sys.argv[6])
    pids = [int(p) for p in sys.argv[7:9]]
    with open(out, "w") as f:
        while not os.path.exists(stop) and time.time() - t0 < maxsecs:
            row = [int(time.time() - t0)]
            b = os.path.exists(busy)
            for p in pids:
                row += rss_fds(p)
            row.append(int(b or os.path.exists(busy)))
            f.write(" ".join(map(str, row)) + "\n")
            f.flush()
            time.sleep(1 - (time.time() - t0) % 1)
    return 0


def main():
    if sys.argv[1] == "sample":
        return sample()
    samples, out, ncl, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    fd0_s, fd1_s, fd0_m, fd1_m = map(int, sys.argv[5:9])
    ok = True

    tot = dict(ops=0, bytes_written=0, bytes_verified=0)
    slowest = 0
    for c in range(ncl):
        j = load_json(os.path.join(out, "client.%d" % c))
        if not j:
            print("client %d: no figures" % c)
            continue
        print("client %d: %7d ops (write %d, read %d, flush %d, trim %d, zero %d), "
              "%5d MiB written, %5d MiB verified" % (c, j["ops"], j["write"], j["read"], j["flush"], j["trim"],
                                                     j["zero"], j["bytes_written"] >> 20,
                                                     j["bytes_verified"] >> 20))
        for k in tot:
            tot[k] += j[k]
        slowest = max(slowest, j["max_batch_ms"])
    print("clients: %d ops, %d MiB written, %d MiB verified; slowest request batch %d ms" %
          (tot["ops"], tot["bytes_written"] >> 20, tot["bytes_verified"] >> 20, slowest))
    sm = words(os.path.join(out, "snapshots"))
    print("online snapshots: %s, merges: %s" % tuple(sm or ["?", "?"]))
    ms = {}
    for w in zip(*[iter(words(os.path.join(out, "snapshot-ms")))] * 2):
        ms.setdefault(w[0], []).append(int(w[1]))
    for op, v in sorted(ms.items()):
        print("  %s: median %d ms, max %d ms" % (op, statistics.median(v), max(v)))
    ct = words(os.path.join(out, "container"))
    print("container: %s runs of /bin/true, %s start+stop" % tuple(ct or ["?", "?"]))
    fs = load_json(os.path.join(out, "fs"))
    if fs:
        print("file writer: %d files written, %d deleted, %d MiB written, %d MiB verified" %
              (fs["files_written"], fs["files_deleted"], fs["bytes_written"] >> 20, fs["bytes_verified"] >> 20))

    rows = []
    for line in open(samples):
        w = line.split()
        if len(w) == 6 and all(x.isdigit() for x in w):
            rows.append(list(map(int, w)))
    if len(rows) < 8:
        print("resources: only %d samples, too few to judge" % len(rows))
        return 1
    warm = max(20, secs // 10)
    judged = [r for r in rows if warm <= r[0] <= secs]
    if len(judged) < 8:
        print("resources: only %d samples between %d s and %d s, too few to judge" % (len(judged), warm, secs))
        return 1
    print("timeline (s: ploop-nbd RSS KiB/fds, mount daemon RSS KiB/fds):")
    step = max(1, len(rows) // 12)
    for r in rows[::step] + ([rows[-1]] if (len(rows) - 1) % step else []):
        print("  %4d: %7d/%-3d %7d/%-3d%s" % (tuple(r[:5]) + (" (snapshot or merge running)" if r[5] else "",)))
    q = max(1, len(judged) // 4)
    for name, col, fd0, fd1 in (("ploop-nbd", 1, fd0_s, fd1_s), ("mount daemon", 3, fd0_m, fd1_m)):
        rss = [r[col] for r in judged if r[col] > 0 and not (col == 1 and r[5])]
        fds = [r[col + 1] for r in rows if r[col + 1] > 0]
        if len(rss) < 4:
            print("%s: no samples" % name)
            ok = False
            continue
        first, last = statistics.median(rss[:q]), statistics.median(rss[-q:])
        limit = first * 1.10 + 8192
        rss_ok = last <= limit
        fd_ok = fd0 == fd1
        print("%s: RSS %d KiB at start, %d at end; median %d KiB in the first quarter after %d s "
              "of warm-up, %d in the last (limit %d): %s" %
              (name, rows[0][col], rows[-1][col], first, warm, last, limit, "flat" if rss_ok else "GROWS"))
        print("%s: fds at idle %d before, %d after: %s; %d..%d during the load" %
              (name, fd0, fd1, "equal" if fd_ok else "DIFFERENT", min(fds), max(fds)))
        ok = ok and rss_ok and fd_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
