#!/usr/bin/env bash
# The cgroup v2 code path. On a v2 host: limits in memory.max,
# memory.swap.max, pids.max, freeze through cgroup.freeze. On a hybrid host
# (v1 controllers + a controller-less v2 tree) the test hook
# PLOOP_CONTAINER_CGROUP=v2 drives the v2 attach/freeze/kill/cleanup on that
# tree; limits there must be refused in one line. Legacy-only hosts skip.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"

fstype() { stat -f -c %T "$1" 2>/dev/null; }
if [[ $(fstype /sys/fs/cgroup) == cgroup2fs ]]; then
  mode=v2 base=/sys/fs/cgroup limits=(--memory 64M --swap 32M --pids 50)
elif [[ $(fstype /sys/fs/cgroup/unified) == cgroup2fs ]]; then
  mode=hybrid base=/sys/fs/cgroup/unified limits=(--pids 0)
  export PLOOP_CONTAINER_CGROUP=v2
else
  skip "no cgroup v2 hierarchy on this host"
fi
echo "host cgroup mode: $mode"
ct create v --size 64M
if [[ $mode == hybrid ]]; then
  err=$(expect_fail ct run v --memory 64M -- true)
  [[ $err == *"no memory/pids controllers"* ]] || fail "limits on a controller-less tree: $err"
  assert_no_leaks v
fi
ct start v "${limits[@]}" -- /bin/sh -c 'while :; do echo x >> /root/ticks; sleep 0.1; done'
wait_running v
dir=$base/$(ct_cgroup_parent)/v
[[ -d $dir ]] || fail "no v2 cgroup at $dir"
pid=$(ct list | awk '$1 == "v" {print $3}')
grep -qx "$pid" "$dir/cgroup.procs" || fail "PID 1 ($pid) not in $dir"
if [[ $mode == v2 ]]; then
  [[ $(cat "$dir/memory.max") -eq $((64 << 20)) ]] || fail "memory.max"
  [[ ! -f $dir/memory.swap.max || $(cat "$dir/memory.swap.max") -eq $((32 << 20)) ]] || fail "memory.swap.max"
  [[ $(cat "$dir/pids.max") -eq 50 ]] || fail "pids.max"
fi

# The freeze check counts ticks: wait for the first (a loaded host may take
# a while to run the shell's first write).
for _ in $(seq 100); do [[ -s $CTROOT/v/rootfs/root/ticks ]] && break; sleep 0.1; done
[[ -s $CTROOT/v/rootfs/root/ticks ]] || fail "the container wrote no tick in 10 s"
ct freeze v
grep -qx "frozen 1" "$dir/cgroup.events" || fail "cgroup.events does not say frozen"
[[ $(ct list | awk '$1 == "v" {print $2}') == frozen ]] || fail "list does not say frozen"
t1=$(wc -l < "$CTROOT/v/rootfs/root/ticks"); sleep 0.4; t2=$(wc -l < "$CTROOT/v/rootfs/root/ticks")
[[ $t1 -eq $t2 ]] || fail "frozen container kept running"
ct thaw v
grep -qx "frozen 0" "$dir/cgroup.events" || fail "cgroup.events does not say thawed"
[[ $(ct exec v -- hostname) == v ]] || fail "exec in v2 mode"
ct stop v --timeout 0
[[ ! -d $dir ]] || fail "v2 cgroup left: $dir"
assert_no_leaks v
echo PASS
