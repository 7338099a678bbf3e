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
