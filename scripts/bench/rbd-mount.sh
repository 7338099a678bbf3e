#!/usr/bin/env bash
# `ploop mount` of a disk in Ceph (rbd:POOL/NAME, one throwaway memstore
# cluster): fio on the mounted device (loop over the FUSE file), the FUSE
# ring serving READs and WRITEs with librbd's aio against PLOOP_FUSE_AIO=0
# (every such request on a worker thread doing synchronous librbd I/O).
# 4k 70/30 random read/write at QD32 and 1 MiB sequential reads at QD4 on a
# fully written disk (no allocation in the measured runs); rounds
# interleaved (the order alternates), medians and the aio/workers ratio.
#   env: RUNTIME (s per run, default 10), SIZE (default 512M), ROUNDS
#        (default 3), RBD_BENCH_PORT (the cluster's block of 20 ports;
#        default: derived from its directory)
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
PLOOP=$BUILD/bin/ploop
export PLOOP_NBD=$BUILD/bin/ploop-nbd
RUNTIME=${RUNTIME:-10}
SIZE=${SIZE:-512M}
ROUNDS=${ROUNDS:-3}
for t in fio python3 ceph-mon ceph-osd rbd; do
  command -v $t >/dev/null || { echo "rbd-mount bench: $t not installed, skipped"; exit 0; }
done
[[ -x $PLOOP && -x $PLOOP_NBD ]] || { echo "rbd-mount bench: build first (make all)"; exit 1; }
[[ $(id -u) -eq 0 && -c /dev/fuse ]] || { echo "rbd-mount bench: needs root and /dev/fuse, skipped"; exit 0; }

source "$(dirname "$0")/common.sh"
W=$(mktemp -d /var/tmp/ploop-bench-rbdmount.XXXXXX)
CL=$W/ceph
R=
trap '[[ -n $R ]] && timeout 60 "$PLOOP" umount "$R" >/dev/null 2>&1; "$TOP/scripts/ceph-cluster.sh" stop "$CL"; rm -rf "$W"' EXIT
bytes=$(numfmt --from=iec "$SIZE")
CONF=$("$TOP/scripts/ceph-cluster.sh" start "$CL" --osds 1 --osd-bytes $((bytes + (512 << 20))) \
  ${RBD_BENCH_PORT:+--port "$RBD_BENCH_PORT"}) || { echo "rbd-mount bench: cluster did not start"; exit 1; }
export CEPH_CONF=$CONF
t() { timeout 300 "$@"; }
R="rbd:rbd/bench?conf=$CONF"
t "$PLOOP" init -s "$SIZE" "$R" >/dev/null

# Every cluster written once: the runs measure I/O, not allocation.
dev=$(t "$PLOOP" mount "$R")
t dd if=/dev/zero of="$dev" bs=1M count=$((bytes >> 20)) oflag=direct status=none
t "$PLOOP" umount "$R" >/dev/null

# run MODE(aio|workers) WL: one mount, one fio run, its IOPS.
run() {
  local aio=1 dev iops
  [[ $1 == workers ]] && aio=0
  dev=$(PLOOP_FUSE_AIO=$aio t "$PLOOP" mount "$R")
  iops=$(fio_iops "$2" --filename="$dev" --direct=1 --ioengine=libaio)
  # The counters say which path served the run.
  local n
  n=$(t "$PLOOP" info --json "$R" | python3 -c '
import json, sys
print(json.load(sys.stdin)["server"]["fuse_requests"]["aio"])')
  if [[ $1 == aio && $n -eq 0 ]] || [[ $1 == workers && $n -ne 0 ]]; then
    echo "rbd-mount bench: $1 run served $n requests by aio" >&2
    exit 1
  fi
  t "$PLOOP" umount "$R" >/dev/null
  echo "$iops"
}

declare -A RES=()
echo "rbd-mount bench: SIZE=$SIZE RUNTIME=${RUNTIME}s ROUNDS=$ROUNDS, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= ROUNDS; round++)); do
  order="aio workers"
  ((round % 2 == 0)) && order="workers aio"
  for wl in rand4k seqread1m; do
    for mode in $order; do
      v=$(run "$mode" "$wl")
      RES[$mode.$wl]+="$v "
      echo "round $round $wl $mode: $v IOPS (load $(cut -d' ' -f1 /proc/loadavg))"
    done
  done
done

median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
printf '%-10s %12s %12s %7s\n' workload aio workers ratio
for wl in rand4k seqread1m; do
  a=$(median "${RES[aio.$wl]}") w=$(median "${RES[workers.$wl]}")
  ratio=$(python3 -c "import sys; a, w = map(float, sys.argv[1:]); print(f'{a / w:.2f}x' if w else '-')" "$a" "$w")
  printf '%-10s %12s %12s %7s\n' "$wl" "$a" "$w" "$ratio"
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
