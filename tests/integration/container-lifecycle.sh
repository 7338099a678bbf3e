#!/usr/bin/env bash
# start / list / exec / freeze / thaw / snapshot / stop / destroy of a
# busybox container on a ploop disk; a snapshot of the running container
# mounts read-only with what was written before it; nothing leaks.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"

ct create life --size 256M
ct start life -- /bin/sh -c 'while :; do date +%s%N > /tmp/tick; echo x >> /root/ticks; sleep 0.1; done'
wait_running life
line=$(ct list | awk '$1 == "life"')
[[ $line == *running* ]] || fail "list: $line"
pid=$(awk '{print $3}' <<<"$line")
[[ -d /proc/$pid ]] || fail "list gives pid $pid, not a live process"

# exec joins the namespaces and cgroups: it sees PID 1's command.
[[ $(ct exec life -- cat /proc/1/cmdline | tr '\0' ' ') == "/bin/sh -c while"* ]] || fail "exec does not see PID 1"
[[ $(ct exec life -- hostname) == life ]] || fail "exec not in the UTS namespace"
rc=0; ct exec life -- /bin/sh -c 'exit 5' || rc=$?
[[ $rc -eq 5 ]] || fail "exec status: $rc"
# On a terminal, exec gets a pty of the container's devpts, not ours.
out=$(script -qec "$PLOOP_CONTAINER --root $CTROOT exec life -- /bin/sh -c 'tty; exit 6'" /dev/null </dev/null | tr -d '\r') && rc=0 || rc=$?
[[ $out == */dev/pts/[0-9]* ]] || fail "exec on a terminal: no pty inside: '$out'"
[[ $rc -eq 6 ]] || fail "exec status through the pty: $rc"
ecg=$(ct exec life -- cat /proc/self/cgroup)
grep -q '^[0-9]*:memory:/$' <<<"$ecg" || fail "exec not in the container's memory cgroup (ns view): $ecg"

# A second run/start of a running container is refused, nothing disturbed.
err=$(expect_fail ct run life -- true)
[[ $err == *"is running"* ]] || fail "second run: $err"
rc=0; ct start life >/dev/null 2>&1 || rc=$?
[[ $rc -eq 4 ]] || fail "second start exit code $rc, want 4"

# Freeze: the tick stops; thaw: it moves again.
ct freeze life
[[ $(ct list | awk '$1 == "life" {print $2}') == frozen ]] || fail "list does not say frozen"
err=$(expect_fail ct exec life -- true)
[[ $err == *frozen* ]] || fail "exec into a frozen container: $err"
t1=$(wc -l < "$CTROOT/life/rootfs/root/ticks"); sleep 0.5; t2=$(wc -l < "$CTROOT/life/rootfs/root/ticks")
[[ $t1 -eq $t2 ]] || fail "frozen container kept running ($t1 -> $t2 ticks)"
ct thaw life
sleep 0.5
t3=$(wc -l < "$CTROOT/life/rootfs/root/ticks")
[[ $t3 -gt $t2 ]] || fail "thawed container does not run ($t2 -> $t3)"

# Snapshot while running: files written before it are in it, later ones are not.
ct exec life -- /bin/sh -c 'echo before > /root/before'
snap=$(ct snapshot life)
[[ -n $snap ]] || fail "snapshot printed no id"
ct exec life -- /bin/sh -c 'echo after > /root/after'
[[ $(ct list | awk '$1 == "life" {print $2}') == running ]] || fail "container not running after snapshot"
mkdir -p "$TMP/snap"
ct mount life --snapshot "$snap" "$TMP/snap"
cleanup "'$PLOOP_CONTAINER' --root '$CTROOT' umount life '$TMP/snap' 2>/dev/null"
[[ $(cat "$TMP/snap/root/before") == before ]] || fail "snapshot lacks a file written before it"
[[ ! -e $TMP/snap/root/after ]] || fail "snapshot has a file written after it"
grep " $TMP/snap " /proc/mounts | grep -q " ro[ ,]" || fail "snapshot not mounted read-only"
touch "$TMP/snap/x" 2>/dev/null && fail "snapshot mount is writable"
ct umount life "$TMP/snap"

# Stop: SIGTERM is ignored by a shell as PID 1, so SIGKILL after the timeout;
# returns only when everything is released.
ct stop life --timeout 1
[[ $(ct list | awk '$1 == "life" {print $2}') == stopped ]] || fail "not stopped"
assert_no_leaks life
err=$(expect_fail ct stop life)
[[ $err == *"not running"* ]] || fail "stop of a stopped container: $err"

# Writes survive stop/start.
[[ $(ct run life -- cat /root/after) == after ]] || fail "write lost across stop/start"

# A snapshot of a stopped container is taken offline and mounts the same way.
snap2=$(ct snapshot life)
[[ -n $snap2 && $snap2 != "$snap" ]] || fail "offline snapshot id '$snap2'"
ct mount life --snapshot "$snap2" "$TMP/snap"
[[ $(cat "$TMP/snap/root/after") == after ]] || fail "offline snapshot lacks data"
ct umount life "$TMP/snap"
assert_no_leaks life

# The monitor dies (SIGKILL): the container goes on; run and destroy refuse
# to touch it, stop ends it and cleans what the monitor would have.
ct start life -- /bin/sh -c 'while :; do sleep 0.2; done'
wait_running life
kill -9 "$(sed -n 's/^monitor_pid=//p' "$CTROOT/life/state")"
sleep 0.2
err=$(expect_fail ct run life -- true); [[ $err == *"without its monitor"* ]] || fail "run over an orphan: $err"
err=$(expect_fail ct destroy life); [[ $err == *"without its monitor"* ]] || fail "destroy of an orphan: $err"
[[ $(ct exec life -- echo alive) == alive ]] || fail "orphaned container was disturbed"
ct stop life --timeout 0
assert_no_leaks life

ct destroy life
[[ ! -e $CTROOT/life ]] || fail "destroy left files"
assert_no_leaks life
echo PASS
