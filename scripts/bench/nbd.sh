#!/usr/bin/env bash
# NBD serving benchmark: fio (nbd engine) against ploop-nbd, against
# `qemu-nbd -f parallels --cache=none --aio=native` on the same ploop image,
# and against `nbdkit file` on a raw copy; fio's own O_DIRECT libaio on the
# raw file is the ceiling.  Random 4k 70/30 read/write at QD32 and
# sequential 1 MiB reads and writes, on a fully allocated 1 GiB image and on
# an empty thin one.  Prints IOPS side by side, ratios, and server peak RSS.
#   env: RUNTIME (s per run, default 5), SIZE (default 1G), THREADS (ploop-nbd -t),
#        BENCH_DIR (where the images live, default /var/tmp; must take O_DIRECT)
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
PLOOP=$BUILD/bin/ploop
PLOOP_NBD=$BUILD/bin/ploop-nbd
RUNTIME=${RUNTIME:-5}
SIZE=${SIZE:-1G}
THREADS=${THREADS:-}
for t in fio qemu-nbd nbdkit nbdcopy python3; do
  command -v $t >/dev/null || { echo "nbd bench: $t not installed, skipped"; exit 0; }
done
[[ -x $PLOOP && -x $PLOOP_NBD ]] || { echo "nbd bench: build first (make all)"; exit 1; }

source "$(dirname "$0")/common.sh"
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ploop-bench-nbd.XXXXXX")
SPID=
stop_server() {
  if [[ -n $SPID ]]; then
    kill "$SPID" 2>/dev/null || true
    wait "$SPID" 2>/dev/null || true
    SPID=
  fi
}
declare -A PIDS=()
trap 'stop_server; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait; rm -rf "$W"' EXIT
SOCK=$W/nbd.sock
URI="nbd+unix:///?socket=$SOCK"

wait_sock() {
  for _ in $(seq 100); do [[ -S $SOCK ]] && return 0; sleep 0.05; done
  echo "nbd bench: server did not start" >&2
  exit 1
}
# Peak resident memory of the running server, in MiB.
rss_mib() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$SPID/status" 2>/dev/null || echo "?"; }

# fio_run NAME ENGINE-ARGS...: prints total IOPS (read + write).
WORKLOADS=(rand4k seqread1m seqwrite1m)

# ---- images -----------------------------------------------------------
# full: every cluster allocated with data; thin: freshly created, empty.
mkdir -p "$W/full"
"$PLOOP" init -t none -s "$SIZE" "$W/full/root.hds" >/dev/null
head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom >"$W/full.raw"
"$PLOOP_NBD" -U "$SOCK" "$W/full" &
SPID=$!
wait_sock
nbdcopy --flush "$W/full.raw" "$URI"
stop_server
sync
make_thin() {
  rm -rf "$W/thin" "$W/thin.raw"
  mkdir -p "$W/thin"
  "$PLOOP" init -t none -s "$SIZE" "$W/thin/root.hds" >/dev/null
  truncate -s "$SIZE" "$W/thin.raw"
}
# qemu-nbd works on its own copy so the two servers never share a file.
make_qemu_copy() { rm -rf "$W/q"; cp -r "$W/$1" "$W/q"; }

declare -A R M
# All three servers run side by side and each workload visits them in turn,
# so a change in the machine's load hits them alike (it is often shared).
run_all() { # KIND
  local kind=$1 wl srv
  if [[ $kind == thin ]]; then
    make_thin
  fi
  make_qemu_copy "$kind"
  cp --sparse=always "$W/$kind.raw" "$W/$kind.fio.raw"
  PIDS=()
  rm -f "$W"/*.sock
  "$PLOOP_NBD" ${THREADS:+-t "$THREADS"} -U "$W/ploop.sock" "$W/$kind" &
  PIDS[ploop]=$!
  qemu-nbd -f parallels --cache=none --aio=native --persistent -k "$W/qemu.sock" "$W/q/root.hds" &
  PIDS[qemu]=$!
  nbdkit -f -U "$W/nbdkit.sock" file "$W/$kind.raw" &
  PIDS[nbdkit]=$!
  for srv in ploop qemu nbdkit; do SOCK=$W/$srv.sock wait_sock; done
  # The copies above are still being written back: let that finish first,
  # or it slows whichever server is measured first.
  sync
  local order=(ploop qemu nbdkit raw) i=0
  for wl in "${WORKLOADS[@]}"; do
    # Rotate who goes first: on a thin image the first one also pays for the
    # others' allocations settling, and load drifts.
    for ((k = 0; k < 4; k++)); do
      srv=${order[(i + k) % 4]}
      if [[ $srv == raw ]]; then
        R[$kind,$wl,raw]=$(fio_iops "$wl" --ioengine=libaio --direct=1 --filename="$W/$kind.fio.raw")
      else
        R[$kind,$wl,$srv]=$(fio_iops "$wl" --ioengine=nbd --uri="nbd+unix:///?socket=$W/$srv.sock")
      fi
    done
    i=$((i + 1))
  done
  for srv in ploop qemu nbdkit; do
    SPID=${PIDS[$srv]}
    M[$kind,$srv]=$(rss_mib)
    stop_server
  done
  PIDS=()
  rm -rf "$W/q" "$W/$kind.fio.raw"
}

start=$(date +%s)
run_all full
run_all thin
ratio() { python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print("%.2fx" % (a/b) if b else "-")' "$1" "$2"; }
pct() { python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print("%.0f%%" % (100*a/b) if b else "-")' "$1" "$2"; }

printf '\nNBD serving, fio IOPS (runtime %ss, %s image, 1 connection; rand4k = 70/30 randrw QD32,\n' "$RUNTIME" "$SIZE"
printf 'seq = QD4; nbdkit file goes through the page cache, the others use O_DIRECT)\n'
printf '%-5s %-10s %10s %10s %10s %10s   %-14s %-12s\n' image workload ploop-nbd qemu-nbd nbdkit-raw fio-raw \
  "vs qemu(>=1.5)" "vs raw(>=75%)"
for kind in full thin; do
  for wl in "${WORKLOADS[@]}"; do
    p=${R[$kind,$wl,ploop]} q=${R[$kind,$wl,qemu]} k=${R[$kind,$wl,nbdkit]} r=${R[$kind,$wl,raw]}
    printf '%-5s %-10s %10s %10s %10s %10s   %-14s %-12s\n' "$kind" "$wl" "$p" "$q" "$k" "$r" \
      "$(ratio "$p" "$q")" "$(pct "$p" "$r")"
  done
done
printf '\nserver peak RSS (MiB): '
for kind in full thin; do
  printf '%s: ploop-nbd %s, qemu-nbd %s, nbdkit %s;  ' "$kind" "${M[$kind,ploop]}" "${M[$kind,qemu]}" "${M[$kind,nbdkit]}"
done
printf '\nbench time: %ss\n' $(($(date +%s) - start))
