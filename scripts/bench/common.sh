# shellcheck shell=bash
# Sourced by the benches (run.sh skips it).
#
# Cleanup: each bench pushes shell commands onto `undo`; bench_cleanup runs
# them newest first (install it with `trap bench_cleanup EXIT`).
undo=()
bench_cleanup() {
  local i
  for ((i = ${#undo[@]} - 1; i >= 0; i--)); do eval "${undo[i]}" >/dev/null 2>&1 || true; done
}

# bench_ram_dir GIB: ext4 on a tmpfs-backed loop device with direct I/O, GIB
# in size, mounted on a new directory, RAM_DIR. A quiet, fast
# disk with the same filesystem and the same O_DIRECT/libaio/io_uring paths
# as /var/tmp (tmpfs itself has no O_DIRECT): what is left of a comparison
# there is each tool's own cost, not the shared disk's mood. Fails (returns
# 1, prints the reason) when memory is short.
bench_ram_dir() {
  local gib=$1 avail_kb dir img dev
  avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
  if ((avail_kb < (gib + 2) * 1024 * 1024)); then
    echo "needs $((gib + 2)) GiB of available memory for a RAM-backed disk, has $((avail_kb / 1024 / 1024)) GiB" >&2
    return 1
  fi
  dir=$(mktemp -d /var/tmp/ploop-bench-ram.XXXXXX)
  undo+=("rmdir $dir")
  img=/dev/shm/${dir##*/}.img
  truncate -s "${gib}G" "$img"
  undo+=("rm -f $img")
  dev=$(losetup -f --show --direct-io=on "$img")
  undo+=("losetup -d $dev")
  mkfs.ext4 -q -F "$dev"
  mount "$dev" "$dir"
  undo+=("umount $dir")
  # shellcheck disable=SC2034 # for the caller
  RAM_DIR=$dir
}

# fio workloads of the NBD benches: WL's fio arguments, and one fio run of
# WL (RUNTIME seconds over SIZE, with more fio arguments) printing its total
# IOPS, 0 when fio fails (its reason on stderr). Output goes to $W.
wl_args() {
  case $1 in
  rand4k) echo "--rw=randrw --rwmixread=70 --bs=4k --iodepth=32" ;;
  seqread1m) echo "--rw=read --bs=1M --iodepth=4" ;;
  seqwrite1m) echo "--rw=write --bs=1M --iodepth=4" ;;
  esac
}
fio_iops() {
  local wl=$1
  shift
  # shellcheck disable=SC2046
  fio --name=b --output-format=json --runtime="$RUNTIME" --time_based --ramp_time=1 \
    --size="$SIZE" --numjobs=1 --group_reporting $(wl_args "$wl") "$@" >"$W/fio.json" 2>"$W/fio.err" ||
    { echo "fio failed: $(tail -2 "$W/fio.err")" >&2; echo 0; return; }
  # The nbd engine prints "connected" on stdout before the JSON.
  python3 -c '
import json, sys
t = open(sys.argv[1]).read()
try:
    j = json.loads(t[t.index("{"):])["jobs"][0]
    print(int(j["read"]["iops"] + j["write"]["iops"]))
except ValueError:
    print(0)' "$W/fio.json"
}
