#!/usr/bin/env bash
# Container start latency: sequential `/bin/true` containers with
# ploop-container, `runc run` and `bwrap`, same busybox rootfs and the same
# namespaces (pid, mount, uts, ipc, net, cgroup), same limits for the two
# with cgroups (256M RAM, no swap, 1024 tasks), in one run. ploop-container
# is measured twice: with its ploop disk already attached (`ploop-container
# mount`: the launch alone) and with the attach and detach of the disk in
# every run (FUSE daemon + loop + ext4: the whole `run`). Rounds interleave
# the four blocks so the host's load weighs on all alike; medians, and
# ratios against runc (and the launch's distance to bwrap) are printed.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
CT=$BUILD/bin/ploop-container
N=${N:-40}
[[ $(id -u) -eq 0 ]] || { echo "container bench: needs root, skipped"; exit 0; }
for t in runc bwrap; do command -v $t >/dev/null || { echo "container bench: $t missing (scripts/install-deps.sh)"; exit 1; }; done
[[ -x $CT ]] || { echo "container bench: $CT not built"; exit 1; }

TMP=$(mktemp -d /var/tmp/ploop-bench-ct.XXXXXX)
R=$TMP/ct
finish() {
  "$CT" --root "$R" umount bench >/dev/null 2>&1 || true
  "$CT" --root "$R" destroy bench >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap finish EXIT

ms_per() { python3 -c "import sys; print('%.2f' % ((float(sys.argv[2]) - float(sys.argv[1])) * 1000 / float(sys.argv[3])))" "$@"; }
now() { date +%s.%N; }

"$CT" --root "$R" create bench --size 256M >/dev/null
"$CT" --root "$R" mount bench
# The same tree for the peers, as a plain directory (the ploop mount is the container's own).
mkdir -p "$TMP/bundle/rootfs"
cp -a "$R/bench/rootfs/." "$TMP/bundle/rootfs/"
(cd "$TMP/bundle" && runc spec)
python3 - "$TMP/bundle/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/true"]
c["root"]["readonly"] = False
ns = {n["type"] for n in c["linux"]["namespaces"]}
for t in ("pid", "network", "ipc", "uts", "mount", "cgroup"):
    if t not in ns:
        c["linux"]["namespaces"].append({"type": t})
# Same limits as ploop-container's run below: 256M RAM, no swap, 1024 tasks.
c["linux"]["resources"] = {"memory": {"limit": 256 << 20, "swap": 256 << 20}, "pids": {"limit": 1024},
                           "devices": c["linux"]["resources"].get("devices", [])}
json.dump(c, open(p, "w"), indent=1)
PY

load=$(cut -d' ' -f1-3 /proc/loadavg)
# Warm-up (page cache, first cgroup/netns creations), not timed.
for i in 1 2 3; do
  "$CT" --root "$R" run bench --memory 256M --swap 0 -- /bin/true
  runc --root "$TMP/runc" run -b "$TMP/bundle" warm$i >/dev/null
  bwrap --unshare-all --bind "$TMP/bundle/rootfs" / --proc /proc --dev /dev /bin/true
done

# Rounds of blocks: in each round every tool starts N/ROUNDS containers in a
# row (the "100 sequential /bin/true" of crun's README), tools taking turns
# between blocks so the host's load (other jobs on the same cores) weighs
# on all alike. Not one-by-one interleaving: a namespace's teardown is
# asynchronous (cleanup_net, RCU) and the next tool's clone waits for it, so
# each tool would pay for its predecessor's exit. Medians resist outliers.
ROUNDS=${ROUNDS:-4}
for f in ours full runc bwrap; do : >"$TMP/$f.ms"; : >"$TMP/$f.cpu"; done
# Each start is timed on the wall clock and, where perf is installed, in CPU
# time of the tool and every process it forks (perf stat task-clock): on a
# host shared with other jobs the wall clock mostly measures waiting for a
# core, the CPU time what each tool itself costs.
PERF=$(command -v perf || true)
# timed NAME CMD...: appends wall and CPU microseconds to $TMP/NAME.{ms,cpu}.
timed() {
  local name=$1 a
  shift
  a=$(date +%s%N)
  if [[ -n $PERF ]]; then
    "$PERF" stat -x, -e task-clock -o "$TMP/perf.out" -- "$@"
    echo $(( ($(date +%s%N) - a) / 1000 )) >>"$TMP/$name.ms"
    awk -F, '$3 == "task-clock" || $3 ~ /^task-clock/ {printf "%d\n", $1 * 1000}' "$TMP/perf.out" >>"$TMP/$name.cpu"
  else
    "$@"
    echo $(( ($(date +%s%N) - a) / 1000 )) >>"$TMP/$name.ms"
  fi
}
per=$(( (N + ROUNDS - 1) / ROUNDS ))
for round in $(seq $ROUNDS); do
  for i in $(seq $per); do
    PLOOP_CONTAINER_TIMING=1 timed ours "$CT" --root "$R" run bench --memory 256M --swap 0 -- /bin/true 2>>"$TMP/timing"
  done
  "$CT" --root "$R" umount bench
  for i in $(seq $per); do
    PLOOP_CONTAINER_TIMING=1 timed full "$CT" --root "$R" run bench --memory 256M --swap 0 -- /bin/true 2>>"$TMP/timing-full"
  done
  "$CT" --root "$R" mount bench
  for i in $(seq $per); do
    timed runc runc --root "$TMP/runc" run -b "$TMP/bundle" b$round-$i >/dev/null
  done
  for i in $(seq $per); do
    timed bwrap bwrap --unshare-pid --unshare-net --unshare-ipc --unshare-uts --unshare-cgroup \
      --bind "$TMP/bundle/rootfs" / --proc /proc --dev /dev --hostname bench /bin/true
  done
done
stat() {  # mean and median in ms of a file of microseconds
  python3 -c "import statistics,sys; v=[int(x)/1000 for x in open(sys.argv[1])]; print('%.2f %.2f' % (statistics.mean(v), statistics.median(v)))" "$1"
}
read -r ours ours_med < <(stat "$TMP/ours.ms")
read -r full full_med < <(stat "$TMP/full.ms")
read -r runc_ms runc_med < <(stat "$TMP/runc.ms")
read -r bwrap_ms bwrap_med < <(stat "$TMP/bwrap.ms")
cpu_med() { [[ -s $TMP/$1.cpu ]] && python3 -c "import statistics,sys; print('%.2f' % statistics.median(int(x)/1000 for x in open(sys.argv[1])))" "$TMP/$1.cpu" || echo -; }

phases() {
  python3 - "$1" <<'PY'
import re, statistics, sys
d = {}
for l in open(sys.argv[1]):
    for k, v in re.findall(r"(\w+)=([\d.]+)ms", l):
        d.setdefault(k, []).append(float(v))
print("  ".join("%s %.2f" % (k, statistics.median(v)) for k, v in d.items()))
PY
}
ratio() { python3 -c "print('%.2fx' % ($1 / $2))"; }
echo "load average before: $load, after: $(cut -d' ' -f1-3 /proc/loadavg)"
cpu_ratio() { [[ $1 != - && $2 != - ]] && ratio "$1" "$2" || echo -; }
printf '%-46s %9s %9s %8s %9s %8s\n' "start of /bin/true (N=$N each, $ROUNDS rounds)" "mean ms" "median" "vs runc" "CPU ms" "vs runc"
row() {  # label file wall-mean wall-median
  printf '%-46s %9s %9s %8s %9s %8s\n' "$1" "$3" "$4" "$(ratio "$4" "$runc_med")" "$(cpu_med "$2")" \
    "$(cpu_ratio "$(cpu_med "$2")" "$(cpu_med runc)")"
}
row "ploop-container run, incl. attach+detach" full "$full" "$full_med"
row "ploop-container run, disk attached (launch)" ours "$ours" "$ours_med"
row "runc run" runc "$runc_ms" "$runc_med"
row "bwrap (no cgroups, no limits)" bwrap "$bwrap_ms" "$bwrap_med"
echo "ploop-container phases, median ms, disk attached: $(phases "$TMP/timing")"
echo "ploop-container phases, median ms, with attach:   $(phases "$TMP/timing-full")"
python3 - "$full_med" "$ours_med" "$runc_med" "$bwrap_med" "$(cpu_med full)" "$(cpu_med ours)" "$(cpu_med runc)" "$(cpu_med bwrap)" <<'PY'
import sys
full, ours, runc, bwrap = map(float, sys.argv[1:5])
print("wall: whole run incl. attach vs runc %.2fx (target <= 1.00x: %s); launch vs bwrap %+.2f ms (target within 2 ms: %s)"
      % (full / runc, "met" if full <= runc else "NOT met", ours - bwrap, "met" if ours - bwrap <= 2 else "NOT met"))
if "-" not in sys.argv[5:]:
    full, ours, runc, bwrap = map(float, sys.argv[5:])
    print("CPU:  whole run incl. attach vs runc %.2fx (%s); launch vs bwrap %+.2f ms (%s)"
          % (full / runc, "met" if full <= runc else "NOT met", ours - bwrap, "met" if ours - bwrap <= 2 else "NOT met"))
PY
