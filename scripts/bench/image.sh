#!/usr/bin/env bash
# Image tool benchmark: `ploop import`/`export` of a 1 GiB raw file (mostly
# random data, some zero holes) against `qemu-img convert` to and from
# parallels; `ploop send -o FILE` of a snapshot against `ploop export` of it;
# `ploop snapshot` on a 1 GiB and a 64 GiB thin disk holding 1 GiB
# of data; merge of 1 GiB of data (`ploop snapshot-merge -A`) against
# `qemu-img commit` of the same data in a qcow2 chain, in two layouts.  Every timed run ends
# with its output durable (fsync of that output) and starts with cold caches (except
# the snapshot latencies, see below).
#   env: SIZE_MIB (default 1024), REPEAT (snapshot runs, default 5), MERGE_ROUNDS
#   (default 3), BENCH_DIR (default /var/tmp; "ram": ext4 on a tmpfs-backed
#   direct-I/O loop device, see common.sh)
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
PLOOP=$BUILD/bin/ploop
PLOOP_NBD=$BUILD/bin/ploop-nbd
SIZE_MIB=${SIZE_MIB:-1024}
REPEAT=${REPEAT:-5}
MERGE_ROUNDS=${MERGE_ROUNDS:-3}
for t in qemu-img python3; do
  command -v $t >/dev/null || { echo "image bench: $t not installed, skipped"; exit 0; }
done
[[ -x $PLOOP ]] || { echo "image bench: build first (make all)"; exit 1; }
export PLOOP_NO_PROGRESS=1

source "$(dirname "$0")/common.sh"
stop_daemon() { [[ -f $W/nbd.pid ]] && kill "$(cat "$W/nbd.pid")" 2>/dev/null; rm -f "$W/nbd.pid"; sleep 0.3; }
W=
trap 'stop_daemon; rm -rf "$W"; bench_cleanup' EXIT
# Two sources, two images, two exports; the merge's second layout needs the
# two sources, a+b and both chains of twice the size at once: about 8x.
need_kb=$((SIZE_MIB * 8 * 1024))
if [[ ${BENCH_DIR:-} == ram ]]; then
  bench_ram_dir $(((need_kb / 1024 / 1024) + 2)) || { echo "image bench (ram): skipped"; exit 0; }
  BENCH_DIR=$RAM_DIR
fi
DIR=${BENCH_DIR:-/var/tmp}
free_kb=$(df -k --output=avail "$DIR" | tail -1)
if ((free_kb < need_kb)); then
  echo "image bench: needs $((need_kb / 1024)) MiB free in $DIR, has $((free_kb / 1024)) MiB; skipped"
  exit 0
fi
W=$(mktemp -d "$DIR/ploop-bench-image.XXXXXX")

DROP=yes
drop_caches() {
  sync
  if [[ $DROP == yes ]] && ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
    DROP=no
    echo "(cannot drop caches here: runs are warm-cache)"
  fi
}
now() { date +%s.%N; }
# timed OUT CMD...: seconds for CMD plus an fsync of its output OUT (a file,
# or every file in a directory), after dropping caches; stdout of CMD discarded.
# Only OUT is synced, so other writers on the host do not add to the figure.
timed() {
  local out=$1 t0 t1
  shift
  drop_caches
  t0=$(now)
  "$@" >/dev/null
  if [[ -d $out ]]; then sync -- "$out"/*; else sync -- "$out"; fi
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'
}
ratio() { awk -v o="$1" -v t="$2" 'BEGIN {printf "%.2f", t / o}'; } # > 1: ours is faster
row() { printf "%-34s %10.3f s %10.3f s %8sx\n" "$1" "$2" "$3" "$(ratio "$2" "$3")"; }

# Raw sources: random data with a zero MiB in every 8, and a second version
# that differs in every data cluster (for the merge).
mkraw() {
  python3 - "$1" "$SIZE_MIB" "$2" <<'EOF'
import random, sys
path, mib, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
with open(path, "wb") as f:
    for i in range(mib):
        if i % 8 == 7:
            f.seek(1 << 20, 1)
        else:
            f.write(rnd.randbytes(1 << 20))
    f.truncate(mib << 20)
EOF
}
echo "preparing ${SIZE_MIB} MiB raw files in $W ..."
mkraw "$W/a.raw" 1
mkraw "$W/b.raw" 2

printf "%-34s %12s %12s %9s\n" "operation (${SIZE_MIB} MiB)" "ploop" "qemu-img" "qemu/ours"

# --- import / export
t_ours=$(timed "$W/disk" "$PLOOP" import "$W/a.raw" "$W/disk")
t_qemu=$(timed "$W/q.hds" qemu-img convert -f raw -O parallels "$W/a.raw" "$W/q.hds")
row "import raw -> image" "$t_ours" "$t_qemu"
t_ours=$(timed "$W/ours.raw" "$PLOOP" export -o "$W/ours.raw" "$W/disk")
t_qemu=$(timed "$W/qemu.raw" qemu-img convert -f parallels -O raw "$W/q.hds" "$W/qemu.raw")
row "export image -> raw" "$t_ours" "$t_qemu"
cmp "$W/a.raw" "$W/ours.raw" || echo "WARNING: our export differs from the source"
cmp "$W/a.raw" "$W/qemu.raw" || echo "WARNING: qemu's export differs from the source"
rm -f "$W/ours.raw" "$W/qemu.raw" "$W/q.hds"

# --- send vs export of one snapshot's same bytes: the stream's reader and
# writer against export's (target: send's throughput >= 0.9x export's).
S=$("$PLOOP" snapshot "$W/disk")
t_send=$(timed "$W/s.stream" "$PLOOP" send --json -u "$S" -o "$W/s.stream" "$W/disk") # --json: the summary to stdout, discarded
t_exp=$(timed "$W/e.raw" "$PLOOP" export -u "$S" -o "$W/e.raw" "$W/disk")
printf "%-34s %10.3f s %10.3f s %8sx  (send's throughput / export's; target >= 0.9)\n" \
  "send -o FILE / export, one snapshot" "$t_send" "$t_exp" "$(ratio "$t_send" "$t_exp")"
rm -f "$W/s.stream" "$W/e.raw"

# --- snapshot: median of REPEAT runs, 1 GiB and 64 GiB thin disks with the same data.
# Caches stay warm here: the figure is the snapshot's own latency (its syncs),
# not the time to page the ploop binary in from a cold disk.
snap_ms() {
  local d=$1 i times=()
  for ((i = 0; i < REPEAT; i++)); do
    sync
    local t0 t1
    t0=$(now)
    "$PLOOP" snapshot "$d" >/dev/null
    t1=$(now)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) * 1000}')")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)]}'
}
"$PLOOP" import -s 64G "$W/a.raw" "$W/disk64" >/dev/null
# Reference: the cost of starting the binary at all.
start_ms=$(
  t0=$(now)
  "$PLOOP" --version >/dev/null
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) * 1000}'
)
s1=$(snap_ms "$W/disk")
s64=$(snap_ms "$W/disk64")
printf "%-34s %10s ms %10s ms   (median of %d; ploop --version alone: %s ms)\n" \
  "snapshot offline, 1 GiB / 64 GiB" "$s1" "$s64" "$REPEAT" "$start_ms"
# Online: ploop-nbd serves the disk; `ploop snapshot` asks it over the control socket.
if [[ -x $PLOOP_NBD ]]; then
  for d in disk disk64; do
    "$PLOOP_NBD" -U "$W/nbd.sock" -d -P "$W/nbd.pid" "$W/$d" 2>>"$W/nbd.log"
    "$PLOOP" snapshot "$W/$d" >/dev/null # first request warms the daemon up
    eval "on_$d=\$(snap_ms \"\$W/\$d\")"
    stop_daemon
  done
  # shellcheck disable=SC2154
  printf "%-34s %10s ms %10s ms   (target < 10 ms, equal within noise)\n" \
    "snapshot online, 1 GiB / 64 GiB" "$on_disk" "$on_disk64"
fi
rm -rf "$W/disk" "$W/disk64"

# --- merge: a top holding SIZE of data (ploop snapshot-merge -A) against
# qemu-img commit of the same data in a qcow2 chain, two layouts:
#  1. the top rewrote every data cluster of the base (b over a): ours goes up,
#     copying the base's clusters the top does not shadow (none) into the top,
#     which then takes the base's file name; qemu commits the top's data down.
#  2. the top's data lies beside the base's (b in the first half of a disk of
#     twice SIZE, a in the second): both copy all of the top into new clusters
#     of the base (ours goes down: up would copy as much).
# Both sides end durable and free the merged-away data: ours fdatasyncs the
# written delta, commits the descriptor and unlinks the merged-away file
# before it returns; qemu-img commit fdatasyncs the base, then empties the top
# (zero-range, ftruncate, fdatasync; strace shows it); `timed` adds the sync
# of the output files on both sides, cheap after those.
ino() { stat -c %i "$1"; }
way() { [[ $1 == "$(ino "$2")" ]] && echo down || echo up; } # did the base file survive?
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {printf "%.3f", a[int((NR + 1) / 2)]}'; }
# merge_layout LABEL PREP BASE TOP QEMU_TOP [DROP...]: MERGE_ROUNDS rounds of:
# PREP (a command making the sources), our chain BASE imported, a snapshot,
# TOP imported over it (import writes only what differs); qemu's BASE as
# qcow2 with QEMU_TOP written into its top (a raw source shorter than the
# image leaves the rest unwritten); DROP files removed (disk space); both
# merges timed, ours first in odd rounds and qemu's first in even ones (the
# shared disk is still busy with the last writes when the second starts);
# both results must equal TOP. Prints the medians and every round.
merge_layout() {
  local label=$1 prep=$2 base=$3 top=$4 qtop=$5 base_ino way_taken r o q ours=() qemu=() rounds=""
  shift 5
  for ((r = 1; r <= MERGE_ROUNDS; r++)); do
    $prep
    "$PLOOP" import "$base" "$W/m" >/dev/null
    "$PLOOP" snapshot "$W/m" >/dev/null
    "$PLOOP" import "$top" "$W/m" >/dev/null
    qemu-img convert -f raw -O qcow2 "$base" "$W/base.qcow2"
    qemu-img create -q -f qcow2 -b "$W/base.qcow2" -F qcow2 "$W/top.qcow2"
    qemu-img convert -n -f raw -O qcow2 "$qtop" "$W/top.qcow2"
    rm -f "$@"
    base_ino=$(ino "$W/m/root.hds")
    if ((r % 2)); then
      o=$(timed "$W/m" "$PLOOP" snapshot-merge -A "$W/m")
      q=$(timed "$W/base.qcow2" qemu-img commit -q "$W/top.qcow2")
    else
      q=$(timed "$W/base.qcow2" qemu-img commit -q "$W/top.qcow2")
      o=$(timed "$W/m" "$PLOOP" snapshot-merge -A "$W/m")
    fi
    ours+=("$o") qemu+=("$q") rounds+=" $o/$q"
    way_taken=$(way "$base_ino" "$W/m/root.hds")
    "$PLOOP" export -o "$W/m.raw" "$W/m" >/dev/null
    cmp "$top" "$W/m.raw" || echo "WARNING: merged disk differs from its data"
    rm -rf "$W/m" "$W/m.raw"
    qemu-img convert -f qcow2 -O raw "$W/base.qcow2" "$W/q.raw"
    cmp "$top" "$W/q.raw" || echo "WARNING: qemu's committed base differs from the data"
    rm -f "$W/q.raw" "$W/base.qcow2" "$W/top.qcow2"
  done
  row "merge: $label (ours $way_taken)" "$(median "${ours[@]}")" "$(median "${qemu[@]}")"
  echo "  (medians of $MERGE_ROUNDS rounds, ours/qemu s:$rounds)"
}
merge_layout "top rewrote base" : "$W/a.raw" "$W/b.raw" "$W/b.raw"
# Layout 2: the base from a in the second half of a sparse file.
layout2() {
  truncate -s "${SIZE_MIB}M" "$W/za.raw"
  cat "$W/a.raw" >>"$W/za.raw"
  cat "$W/b.raw" "$W/a.raw" >"$W/ba.raw"
}
merge_layout "top beside base" layout2 "$W/za.raw" "$W/ba.raw" "$W/b.raw" "$W/za.raw"
rm -f "$W/ba.raw"
echo "(ratio > 1: ploop is faster; every timing includes an fsync of the output)"
