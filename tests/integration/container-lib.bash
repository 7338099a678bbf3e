# Shared helpers for tests/integration/container-*.sh (sourced after
# functions.sh). Not a test itself: run.sh only runs *.sh.
requires_root
[[ -x $PLOOP_CONTAINER ]] || skip "ploop-container not built ($PLOOP_CONTAINER)"
[[ -x /bin/busybox ]] || skip "busybox-static not installed"
CTROOT=$TMP/ct
ct() { "$PLOOP_CONTAINER" --root "$CTROOT" "$@"; }

# Every container of this test goes at exit, whatever happened.
_ct_cleanup() {
  local d n
  for d in "$CTROOT"/*/; do
    [[ -d $d ]] || continue
    n=$(basename "$d")
    ct stop --timeout 0 "$n" >/dev/null 2>&1 || true
    ct destroy "$n" >/dev/null 2>&1 || true
  done
}
cleanup _ct_cleanup

# The cgroup parent of containers under $CTROOT: ploop-container-<FNV-1a 32
# of the root path> (cgroup.c group_name), so stale groups of other runs do
# not count.
ct_cgroup_parent() {
  local s=$CTROOT h=2166136261 i c
  for ((i = 0; i < ${#s}; i++)); do
    printf -v c '%d' "'${s:i:1}"
    h=$(( ((h ^ c) * 16777619) & 0xffffffff ))
  done
  printf 'ploop-container-%08x' "$h"
}
# The cgroup directories of container NAME in every hierarchy (empty when gone).
ct_cgroups() { find /sys/fs/cgroup -maxdepth 4 -type d -path "*/$(ct_cgroup_parent)/*" -name "$1" 2>/dev/null; }

# Asserts nothing of container NAME is left on the host: mounts, loop devices
# over its files, attach state, cgroups.
assert_no_leaks() {
  local name=$1
  if grep -q "$CTROOT/$name/" /proc/mounts; then fail "mounts left: $(grep "$CTROOT/$name/" /proc/mounts)"; fi
  if losetup -a | grep -q "$CTROOT/$name/"; then fail "loop devices left: $(losetup -a | grep "$CTROOT/$name/")"; fi
  if grep -qs "$CTROOT/$name" /run/ploop/attach/* 2>/dev/null; then fail "attach state left for $name"; fi
  if pgrep -f "ploop-nbd.*$CTROOT/$name/" >/dev/null; then fail "ploop-nbd daemon left for $name"; fi
  local cg
  cg=$(ct_cgroups "$name")
  [[ -z $cg ]] || fail "cgroups left: $cg"
}

# wait_state NAME STATE: waits until `list` shows container NAME in STATE.
wait_state() {
  local i
  for i in $(seq 100); do
    ct list | awk -v n="$1" -v s="$2" '$1 == n && $2 == s {f=1} END {exit !f}' && return 0
    sleep 0.1
  done
  fail "$1 did not reach $2"
}
# Waits until container NAME is running (for `start`).
wait_running() { wait_state "$1" running; }
