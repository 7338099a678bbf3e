#!/usr/bin/env bash
# The verbs of issue 16: logs (each run headed by its start time and
# command, --follow), snapshot-list/snapshot-delete/rollback, resize (the
# config follows), --json on list/snapshot/snapshot-list/update/resize,
# --init (orphans reaped, SIGTERM reaches a command without a handler),
# "running, monitor gone", the last exit of every run (127 too), and an OOM
# kill named after its victim, not after a later SIGKILL of PID 1.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
requires python3
code() { local rc=0; "$@" >/dev/null 2>&1 || rc=$?; echo $rc; }
json() { python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
wait_stopped() { wait_state "$1" stopped; }

for verb in logs snapshot-list snapshot-delete rollback resize; do
  ct "$verb" --help | grep -q "usage: $verb" || fail "$verb --help"
done
ct run --help | grep -q -- "--init" || fail "run --help does not list --init"

ct create v --size 128M

# logs: one header per run, with its start time and command, in order.
ct start v -- /bin/sh -c 'echo first-output'
wait_stopped v
ct start v -- /bin/echo second-output
wait_stopped v
out=$(ct logs v)
[[ $(grep -c '^--- ploop-container: run started ' <<<"$out") -eq 2 ]] || fail "logs: not two headers: $out"
grep -Eq '^--- ploop-container: run started [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z: /bin/sh -c echo first-output ---$' <<<"$out" ||
  fail "logs: first header: $out"
[[ $(grep -v '^---' <<<"$out" | tr '\n' ' ') == "first-output second-output " ]] || fail "logs: order: $out"
# --follow prints what comes while it runs and ends with the container.
ct start v -- /bin/sh -c 'echo early; sleep 1; echo late'
out=$(timeout 20 "$PLOOP_CONTAINER" --root "$CTROOT" logs v --follow) || fail "logs --follow did not end"
[[ $out == *early*late* ]] || fail "logs --follow missed output: $out"
[[ $(code ct logs nosuch) -eq 3 ]] || fail "logs of a missing container: not 3"

# Last exit of every run: a command that cannot run is 127, and recorded.
rc=0; ct run v -- /no/such/cmd 2>/dev/null || rc=$?
[[ $rc -eq 127 ]] || fail "missing command: exit $rc"
ct list | awk '$1 == "v"' | grep -q "exit 127" || fail "list does not show exit 127: $(ct list)"
[[ $(ct list --json | json 'd[0]["last_exit"]["status"]') -eq 127 ]] || fail "list --json last exit"

# Snapshots: list, rollback of a stopped container, delete.
ct run v -- /bin/sh -c 'echo one > /data'
snap=$(ct snapshot v --json | json 'd["snapshot"]')
[[ -n $snap ]] || fail "snapshot --json gave no id"
ct run v -- /bin/sh -c 'echo two > /data'
ct snapshot-list v | grep -q -- "$snap" || fail "snapshot-list lacks $snap: $(ct snapshot-list v)"
[[ $(ct snapshot-list v --json | json 'len(d)') -eq 1 ]] || fail "snapshot-list --json: $(ct snapshot-list v --json)"
ct start v -- /bin/sh -c 'sleep 100'
wait_running v
[[ $(code ct rollback v "$snap") -eq 4 ]] || fail "rollback of a running container: not 4"
[[ $(code ct snapshot-delete v "$snap") -eq 4 ]] || fail "snapshot-delete on a running container: not 4"
ct stop v --timeout 0 2>/dev/null
ct rollback v "$snap"
[[ $(ct run v -- cat /data) == one ]] || fail "rollback did not bring back the snapshot's data"
expect_fail ct rollback v '{00000000-1111-2222-3333-444444444444}' >/dev/null
expect_fail ct rollback v ../x >/dev/null
snap2=$(ct snapshot v)
ct snapshot-delete v "$snap2"
ct snapshot-list v | grep -q -- "$snap2" && fail "snapshot-delete left $snap2"
[[ $(ct run v -- cat /data) == one ]] || fail "data changed by snapshot-delete"

# resize: stopped (grow), running (grow live), shrink refused while running.
ct resize v 256M
grep -qx "disk_bytes=$((256 << 20))" "$CTROOT/v/config" || fail "config not resized: $(cat "$CTROOT/v/config")"
kb=$(ct run v -- df -k / | awk 'NR == 2 {print $2}')
((kb > 200000)) || fail "filesystem not grown: $kb KiB"
ct start v -- /bin/sh -c 'sleep 100'
wait_running v
# Growing a mounted ext4 needs CAP_SYS_RESOURCE (bit 24), which some
# sandboxes withhold even from root: then the refusal must say so.
if (( 0x$(awk '/^CapEff/ {print $2}' /proc/self/status) >> 24 & 1 )); then
  [[ $(ct resize v 320M --json | json 'd["disk_bytes"]') -eq $((320 << 20)) ]] || fail "resize --json"
  kb=$(ct exec v -- df -k / | awk 'NR == 2 {print $2}')
  ((kb > 260000)) || fail "filesystem not grown live: $kb KiB"
else
  err=$(expect_fail ct resize v 320M)
  [[ $err == *CAP_SYS_RESOURCE* ]] || fail "live resize without CAP_SYS_RESOURCE: $err"
fi
expect_fail ct resize v 200M >/dev/null
[[ $(code ct resize v 1x) -eq 2 ]] || fail "resize with a bad size: not 2"

# update --json, list --json on a running container.
[[ $(ct update v --pids 77 --json | json 'd["pids"]') -eq 77 ]] || fail "update --json"
[[ $(ct list --json | json 'd[0]["state"]') == running ]] || fail "list --json state"
[[ $(ct list --json | json 'd[0]["monitor"]') == True ]] || fail "list --json monitor"

# The monitor dies: list says so, stop still ends the container.
mon=$(sed -n 's/^monitor_pid=//p' "$CTROOT/v/state")
[[ -n $mon ]] || fail "no monitor pid in the state"
kill -9 "$mon"
for i in $(seq 50); do kill -0 "$mon" 2>/dev/null || break; sleep 0.1; done
ct list | awk '$1 == "v"' | grep -q "running, monitor gone" || fail "list: $(ct list)"
[[ $(ct list --json | json 'd[0]["monitor"]') == False ]] || fail "list --json after the monitor died"
ct stop v --timeout 0 2>/dev/null
wait_stopped v

# --init: SIGTERM reaches a command that has no handler (as PID 1 it never
# would), and an orphan is reaped (without --init it stays a zombie).
ct start v --init -- /bin/sleep 100
wait_running v
t0=$(date +%s%N)
err=$(ct stop v --timeout 10 2>&1)
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $err != *SIGKILL* ]] || fail "stop --init needed SIGKILL: $err"
((ms < 5000)) || fail "stop with --init took $ms ms"
orphan='(sleep 0.2 &); exec sleep 100'
ct start v -- /bin/sh -c "$orphan"
wait_running v
sleep 1
ct exec v -- ps -o stat,comm | grep -q '^Z' || fail "no zombie without --init (test is not testing): $(ct exec v -- ps -o pid,stat,comm)"
ct stop v --timeout 0 2>/dev/null
ct start v --init -- /bin/sh -c "$orphan"
wait_running v
sleep 1
! ct exec v -- ps -o stat,comm | grep -q '^Z' || fail "zombie with --init: $(ct exec v -- ps -o pid,stat,comm)"
ct exec v -- ps -o pid,comm | grep -Eq '^ *1 ploop-init' || fail "PID 1 is not the init: $(ct exec v -- ps -o pid,comm)"
ct stop v --timeout 5
rc=0; ct run v --init -- /bin/sh -c 'exit 7' || rc=$?
[[ $rc -eq 7 ]] || fail "--init: exit status $rc, want 7"
rc=0; ct run v --init -- /no/such 2>/dev/null || rc=$?
[[ $rc -eq 127 ]] || fail "--init with a missing command: exit $rc"

# OOM: a child is the victim; a later SIGKILL of PID 1 (stop) is not
# reported as PID 1 being OOM-killed.
hog='x=$(head -c 209715200 /dev/zero | tr "\0" a)'
ct start v --memory 16M --swap 0 -- /bin/sh -c "($hog); echo child-done; sleep 100"
wait_running v
for i in $(seq 120); do grep -q "^child-done" "$CTROOT/v/console.log" && break; sleep 0.25; done
grep -q "^child-done" "$CTROOT/v/console.log" || fail "PID 1 did not outlive its child's OOM kill"
ct stop v --timeout 0 2>/dev/null
wait_stopped v
last=$(ct list | awk '$1 == "v"')
# The kernel may take a second child before the first one's memory is
# reaped: one kill or more, every one a child (PID 1 went on, above).
[[ $last =~ "exit 137, "[1-9][0-9]*" OOM kill(s): sh(" ]] || fail "OOM of a child: $last"
[[ $last != *OOM-killed* ]] || fail "PID 1 reported as OOM-killed: $last"
[[ $last != *OOM-killed* ]] || fail "PID 1 reported OOM-killed: $last"
[[ $(ct list --json | json 'd[0]["last_exit"]["oom_pid1"]') == False ]] || fail "list --json oom_pid1"
# PID 1 itself the victim: still "OOM-killed".
rc=0; err=$(ct run v --memory 16M --swap 0 -- /bin/sh -c "$hog" 2>&1) || rc=$?
[[ $rc -eq 137 ]] || fail "hog as PID 1: exit $rc"
[[ $err == *"PID 1 among them"* ]] || fail "run's OOM message: $err"
ct list | awk '$1 == "v"' | grep -q "exit 137 (OOM-killed)" || fail "PID 1 OOM: $(ct list)"
assert_no_leaks v
echo PASS
