#!/usr/bin/env bash
# Several containers at once: parallel starts, runs and stops share the
# attach machinery and the cgroup parent (removed by whoever exits last);
# each one must start, keep its own hostname and disk, and leave nothing.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"

names=(p1 p2 p3 p4)
for n in "${names[@]}"; do ct create "$n" --size 64M; done

pids=()
for n in "${names[@]}"; do ct start "$n" -- /bin/sh -c "echo $n > /root/me; while :; do sleep 1; done" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a parallel start failed"; done
for n in "${names[@]}"; do
  wait_running "$n"
  [[ $(ct exec "$n" -- hostname) == "$n" ]] || fail "$n: wrong hostname"
  [[ $(ct exec "$n" -- cat /root/me) == "$n" ]] || fail "$n: wrong disk"
done
[[ $(ct list | grep -c running) -eq 4 ]] || fail "not all running: $(ct list)"

pids=()
for n in "${names[@]}"; do ct stop "$n" --timeout 0 & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a parallel stop failed"; done
for n in "${names[@]}"; do assert_no_leaks "$n"; done

# Short runs in parallel loops: starts race with the last exit removing the
# shared cgroup parent.
pids=()
for n in "${names[@]}"; do
  (for i in 1 2 3 4 5; do "$PLOOP_CONTAINER" --root "$CTROOT" run "$n" -- /bin/true || exit 1; done) & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a run in the parallel loop failed"; done
for n in "${names[@]}"; do assert_no_leaks "$n"; done
[[ -z $(find /sys/fs/cgroup -maxdepth 2 -name "$(ct_cgroup_parent)") ]] || fail "cgroup parent left behind"
echo PASS
