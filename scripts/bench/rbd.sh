#!/usr/bin/env bash
# Disks on Ceph: one throwaway cluster (scripts/ceph-cluster.sh, memstore),
# fio (nbd engine) against ploop-nbd serving an rbd:POOL/NAME disk, against
# qemu-nbd serving a copy of the same ploop image through QEMU's own rbd
# driver (parallels over rbd, --cache=none), and `rbd bench` (librbd's own
# aio, 32 in flight) on a raw image of the same size. 4k 70/30 random
# read/write at QD32 and 1 MiB sequential reads and writes at QD4, on fully
# written images; rounds interleaved, medians and ratios printed. Also the
# time of a snapshot of the served rbd disk (online, control socket) and of
# one not served. The migrate part (rbd-migrate.sh): a container whose disk
# is in the pool, a writer appending fsync'ed records, moved between two
# roots N times without CRIU and N times with it (when a working CRIU is
# there): medians of downtime and of the destination's ACQUIRE, disk and
# wire bytes, and the target (downtime < 100 ms without CRIU) met/MISSED.
#   env: PARTS (default "io migrate"), RUNTIME (s per run, default 5), SIZE
#        (default 512M), ROUNDS (default 3), OSDS (default 1), THREADS
#        (ploop-nbd -t), RBD_BENCH_PORT (the cluster's block of 20 ports;
#        default: derived from its directory), N (migrations per mode,
#        default 5), RBD_MIGRATE_PORT (default 21485)
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
PLOOP=$BUILD/bin/ploop
PLOOP_NBD=$BUILD/bin/ploop-nbd
RUNTIME=${RUNTIME:-5}
SIZE=${SIZE:-512M}
ROUNDS=${ROUNDS:-3}
OSDS=${OSDS:-1}
THREADS=${THREADS:-}
PARTS=${PARTS:-io migrate}
has_part() { [[ " $PARTS " == *" $1 "* ]]; }
tools=(python3 ceph-mon ceph-osd rbd)
! has_part io || tools+=(fio qemu-nbd nbdcopy)
for t in "${tools[@]}"; do
  command -v $t >/dev/null || { echo "rbd bench: $t not installed, skipped"; exit 0; }
done
[[ -x $PLOOP && -x $PLOOP_NBD ]] || { echo "rbd bench: build first (make all)"; exit 1; }
qemu_rbd=$(ls /usr/lib/*/qemu/block-rbd.so /usr/lib/qemu/block-rbd.so 2>/dev/null | head -1 || true)
[[ -n $qemu_rbd ]] || echo "rbd bench: QEMU's rbd driver (qemu-block-extra) missing: qemu-nbd column empty"

source "$(dirname "$0")/common.sh"
W=$(mktemp -d /var/tmp/ploop-bench-rbd.XXXXXX)
CL=$W/ceph
declare -A PIDS=()
stop_servers() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap 'stop_servers; mig_cleanup; "$TOP/scripts/ceph-cluster.sh" stop "$CL"; rm -rf "$W"' EXIT
mig_cleanup() { :; }
bytes=$(numfmt --from=iec "$SIZE")
# Three copies of the data (ploop disk, qemu's copy, rbd bench's image) and room.
osd_bytes=$((3 * bytes + (512 << 20)))
has_part io || osd_bytes=$((512 << 20))
start=$(date +%s)
CONF=$("$TOP/scripts/ceph-cluster.sh" start "$CL" --osds "$OSDS" --osd-bytes "$osd_bytes" \
  ${RBD_BENCH_PORT:+--port "$RBD_BENCH_PORT"}) || { echo "rbd bench: cluster did not start"; exit 1; }
export CEPH_CONF=$CONF
t() { timeout 300 "$@"; }

wait_sock() { # SOCK PID ERRFILE
  for _ in $(seq 200); do
    [[ -S $1 ]] && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  echo "rbd bench: server did not start: $(tail -2 "$3" 2>/dev/null)" >&2
  exit 1
}

WORKLOADS=(rand4k seqread1m seqwrite1m)
# rbd bench, 4k random, 32 threads, 70/30 like fio's rand4k: total ops/s.
rbd_bench_iops() {
  local total=$((bytes / 2))
  t rbd bench --io-type readwrite --rw-mix-read 70 --io-pattern rand --io-size 4K --io-threads 32 \
    --io-total "$total" rbd/bench >"$W/rb.out" 2>&1 || { echo "rbd bench failed: $(tail -1 "$W/rb.out")" >&2; echo 0; return; }
  awk '/^elapsed:/ { for (i = 1; i < NF; i++) if ($i == "ops/sec:") print int($(i + 1)) }' "$W/rb.out" | tail -1
}
median() { sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print 0}'; }

run_io() {
# ---- images: the ploop disk on rbd written in full, a copy for qemu ----
head -c "$bytes" /dev/urandom >"$W/src.raw"
D="rbd:rbd/bench-ploop"
t "$PLOOP" init -s "$SIZE" "$D" >/dev/null
"$PLOOP_NBD" ${THREADS:+-t "$THREADS"} -U "$W/ploop.sock" "$D" 2>"$W/ploop.err" &
PIDS[ploop]=$!
wait_sock "$W/ploop.sock" "${PIDS[ploop]}" "$W/ploop.err"
t nbdcopy --flush "$W/src.raw" "nbd+unix:///?socket=$W/ploop.sock"
stop_servers
top=$(rbd ls rbd | grep '^bench-ploop\.root\.hds' | head -1)
t rbd cp --no-progress "rbd/$top" rbd/bench-qemu >/dev/null
t rbd import --no-progress --object-size 1M "$W/src.raw" rbd/bench >/dev/null
rm -f "$W/src.raw"

"$PLOOP_NBD" ${THREADS:+-t "$THREADS"} -U "$W/ploop.sock" "$D" 2>"$W/ploop.err" &
PIDS[ploop]=$!
wait_sock "$W/ploop.sock" "${PIDS[ploop]}" "$W/ploop.err"
servers=(ploop)
if [[ -n $qemu_rbd ]]; then
  # Not --fork (it did not listen here): in the background, waited for by its socket.
  qemu-nbd --persistent --shared=8 -k "$W/qemu.sock" --cache=none \
    --image-opts "driver=parallels,file.driver=rbd,file.pool=rbd,file.image=bench-qemu,file.conf=$CONF" \
    2>"$W/qemu.err" &
  PIDS[qemu]=$!
  wait_sock "$W/qemu.sock" "${PIDS[qemu]}" "$W/qemu.err"
  servers+=(qemu)
fi

declare -gA R=()
add() { R[$1]="${R[$1]:-} $2"; }
for ((round = 0; round < ROUNDS; round++)); do
  for wl in "${WORKLOADS[@]}"; do
    # Rotate who goes first: load on a shared machine drifts.
    n=${#servers[@]}
    for ((k = 0; k < n; k++)); do
      srv=${servers[(round + k) % n]}
      add "$wl,$srv" "$(fio_iops "$wl" --ioengine=nbd --uri="nbd+unix:///?socket=$W/$srv.sock")"
    done
    [[ $wl == rand4k ]] && add "rand4k,rbd" "$(rbd_bench_iops)"
  done
done

# Snapshot of the served disk (online: the server drains and switches) and,
# after the server stops, of the disk alone.
snap_ms() {
  local t0 t1
  t0=$(date +%s%N)
  t "$PLOOP" snapshot "$D" >/dev/null || { echo fail; return; }
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}
snaps_online=() snaps_offline=()
for _ in 1 2 3; do snaps_online+=("$(snap_ms)"); done
# The server's own time for each (drain, flush, new top), from its log.
snaps_server=$(sed -n 's/.*online snapshot .* in \([0-9.]*\) ms.*/\1/p' "$W/ploop.err" | tr '\n' ' ')
snaps_pause=$(sed -n 's/.*online snapshot .* (I\/O paused \([0-9.]*\) ms).*/\1/p' "$W/ploop.err" | tr '\n' ' ')
stop_servers
for _ in 1 2 3; do snaps_offline+=("$(snap_ms)"); done

med() { tr ' ' '\n' <<<"${R[$1]:-}" | { grep . || true; } | median; }
ratio() { python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print("%.2fx" % (a/b) if b else "-")' "$1" "$2"; }
printf '\nDisks on Ceph (%s OSD memstore cluster, pool size %s): IOPS, median of %s rounds of %ss, %s image;\n' \
  "$OSDS" "$((OSDS < 2 ? OSDS : 2))" "$ROUNDS" "$RUNTIME" "$SIZE"
printf 'rand4k = 70/30 randrw QD32, seq = 1 MiB QD4; qemu-nbd = parallels over QEMU rbd, cache=none;\n'
printf 'rbd bench = 4k random 70/30, 32 threads, librbd directly\n'
printf '%-10s %10s %10s %10s   %-15s %-15s\n' workload ploop-nbd qemu-nbd "rbd bench" "vs qemu(>=1.2)" "vs rbd(>=0.8)"
for wl in "${WORKLOADS[@]}"; do
  p=$(med "$wl,ploop") q=$(med "$wl,qemu") r=$(med "$wl,rbd")
  printf '%-10s %10s %10s %10s   %-15s %-15s\n' "$wl" "$p" "$q" "$([[ $wl == rand4k ]] && echo "$r" || echo -)" \
    "$(ratio "$p" "$q")" "$([[ $wl == rand4k ]] && ratio "$p" "$r" || echo -)"
done
printf 'all rounds: '
for k in "${!R[@]}"; do printf '%s:%s; ' "$k" "${R[$k]}"; done
printf '\nsnapshot of the served rbd disk (ms, target < 20): I/O paused %s; whole call in the server %s;\n' \
  "$snaps_pause" "$snaps_server"
printf 'ploop snapshot CLI wall: served %s, not served %s\n' "${snaps_online[*]}" "${snaps_offline[*]}"
printf '(CLI wall times include loading librados/librbd and connecting to the cluster)\n'
}

# ---- migrate: a container on an rbd disk moved between two roots ----
# Two roots on this host, each naming the pool with its own copy of the
# configuration (as two hosts would), migrating over 127.0.0.1; moves
# alternate A->B, B->A. One line per migration in $W/mig.tsv.
run_migrate() {
  local CT=$BUILD/bin/ploop-container A=$W/a B=$W/b CONF_B=$W/ceph-b.conf
  local port=${RBD_MIGRATE_PORT:-21485} n=${N:-5}
  if [[ $(id -u) -ne 0 || ! -x $CT ]]; then
    echo "rbd bench migrate: needs root and ploop-container, skipped"
    return 0
  fi
  cp "$CONF" "$CONF_B"
  mig_cleanup() {
    local r
    for r in "$W/a" "$W/b"; do
      timeout 30 "$BUILD/bin/ploop-container" --root "$r" stop mig --timeout 0 >/dev/null 2>&1 || true
      timeout 30 "$BUILD/bin/ploop-container" --root "$r" destroy mig >/dev/null 2>&1 || true
    done
  }
  local writer='i=0; while :; do i=$((i+1)); echo "$i" >> /log; sync /log; sleep 0.02; done'
  t "$CT" --root "$A" create mig --size 256M --disk "rbd:rbd/benchmig?conf=$CONF" >/dev/null
  t "$CT" --root "$A" start mig --memory 64M -- /bin/sh -c "$writer"
  sleep 1
  local have_criu=0 from=$A to=$B to_conf=$CONF_B from_conf=$CONF mode i j x rp
  "$TOP/scripts/install-criu.sh" >/dev/null 2>&1 && have_criu=1
  printf 'migrate part: load average before: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  : >"$W/mig.tsv"
  for mode in nocriu criu; do
    [[ $mode == criu && $have_criu == 0 ]] && continue
    for ((i = 0; i < n; i++)); do
      CEPH_CONF=$to_conf timeout 120 "$CT" --root "$to" receive --listen "127.0.0.1:$port" --once --timeout 30 \
        >"$W/recv.out" 2>"$W/recv.err" &
      rp=$!
      for j in $(seq 100); do grep -q receiving "$W/recv.out" 2>/dev/null && break; sleep 0.05; done
      if ! CEPH_CONF=$from_conf timeout 120 "$CT" --root "$from" migrate mig "127.0.0.1:$port" --json --timeout 30 \
        $([[ $mode == nocriu ]] && echo --no-criu) >"$W/mig.json" 2>"$W/mig.err"; then
        echo "rbd bench migrate: $mode run $i failed: $(cat "$W/mig.err") / $(cat "$W/recv.err")" >&2
        wait "$rp" || true
        return 1
      fi
      wait "$rp" || true
      python3 - "$W/mig.json" "$mode" >>"$W/mig.tsv" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
assert o["shared_disk"], o
p = o["phases_ms"]
print(sys.argv[2], o["downtime_ms"], o.get("acquire_ms", 0), int(o.get("acquire_ahead", False)),
      sum(o["rounds"]), o["bytes_sent"], int(o["criu"]),
      *(p.get(k, 0) for k in ("freeze", "sync", "checkpoint", "fsfreeze", "release", "prepare", "commit", "dest_start", "dest_mount")))
PY
      x=$from from=$to to=$x
      x=$from_conf from_conf=$to_conf to_conf=$x
      sleep 0.5 # the writer runs again there before the next move
    done
  done
  python3 - "$W/mig.tsv" "$n" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print("\nMigration of a container whose disk is in the pool (its lock moves, no disk bytes), %s runs per mode:" % sys.argv[2])
print("%-12s %12s %12s %12s %12s %12s %10s" % ("mode", "downtime ms", "acquire ms", "opened ahead", "disk bytes", "wire bytes", "restored"))
med = {}
for mode, label in (("nocriu", "without CRIU"), ("criu", "with CRIU")):
    r = [x for x in rows if x[0] == mode]
    if not r:
        print("%-12s %12s" % (label, "- (no working CRIU)"))
        continue
    med[mode] = statistics.median(float(x[1]) for x in r)
    print("%-12s %12.1f %12.1f %9d/%-2d %12d %12d %7d/%-2d" % (label, med[mode], statistics.median(float(x[2]) for x in r),
          sum(int(x[3]) for x in r), len(r), max(int(x[4]) for x in r), statistics.median(int(x[5]) for x in r),
          sum(int(x[6]) for x in r), len(r)))
names = ("freeze", "sync", "criu dump", "fsfreeze", "release", "prepare", "commit", "dest start", "of which mount")
for mode, label in (("nocriu", "without CRIU"), ("criu", "with CRIU")):
    r = [x for x in rows if x[0] == mode]
    if r:
        print("phases, median ms, %s: %s" % (label, ", ".join(
            "%s %.1f" % (n, statistics.median(float(x[7 + i]) for x in r)) for i, n in enumerate(names))))
print("all downtimes (ms): " + "; ".join("%s: %s" % (m, " ".join(x[1] for x in rows if x[0] == m)) for m in ("nocriu", "criu")))
if "nocriu" in med:
    print("target: downtime < 100 ms without CRIU: %s (median %.1f ms)" % ("met" if med["nocriu"] < 100 else "MISSED", med["nocriu"]))
PY
}

has_part io && run_io
has_part migrate && run_migrate
printf 'load average at the end: %s; bench time: %ss\n' "$(cut -d' ' -f1-3 /proc/loadavg)" $(($(date +%s) - start))
