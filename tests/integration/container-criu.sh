#!/usr/bin/env bash
# Process checkpoint/restore with a real CRIU (>= 4.2, scripts/install-criu.sh):
# a writer that keeps its counter in memory and appends fsync'ed, checksummed
# records to its own disk is checkpointed (processes end, nothing left on the
# host), restored, and goes on: same pids inside, counter continuing with no
# restart, an in-memory token intact, limits back, output still in
# console.log. Also --leave-running on a frozen container, a post-copy
# (--lazy-pages) restore, and the refusals.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"

root=$(cd "$(dirname "$0")/../.." && pwd)
out=$("$root/scripts/install-criu.sh" 2>&1) || skip "no working CRIU could be provided: $(tail -1 <<<"$out")"

# Every record is "N md5(N)"; numbers go 1, 2, 3... with no gap, no repeat.
check_log() {
  awk -v min="$1" '
    { n = $1 + 0
      if (NR == 1 && n != 1) { print "first record is " n; exit 1 }
      if (NR > 1 && n != prev + 1) { print "record " NR ": " n " after " prev; exit 1 }
      prev = n }
    END { if (prev < min) { print "only " prev " records, want more than " min; exit 1 } }' "$2" || return 1
  local bad
  bad=$(head -n 40 "$2" | while read -r n sum rest; do
    [[ $(echo "$n" | md5sum | cut -d' ' -f1) == "$sum" ]] || echo "$n"
  done)
  [[ -z $bad ]] || { echo "bad checksum in records: $bad"; return 1; }
}

writer='mkdir -p /data; echo $$ > /data/pid
/bin/sh -c "t=\$(head -c 8 /dev/urandom | md5sum | cut -c1-16); echo \$t > /data/token; x=\$(head -c 8388608 /dev/zero | tr \"\\\\0\" a); echo \$\$ > /data/holder.pid; while :; do echo \$t > /data/token.now; sleep 0.1; done" &
i=0; while :; do i=$((i+1)); echo "$i $(echo $i | md5sum | cut -d" " -f1)" >> /data/log; sync /data/log 2>/dev/null || sync; echo "tick $i"; sleep 0.05; done'

ct create c --size 256M
ct start c --memory 200M --pids 64 -- /bin/sh -c "$writer"
wait_running c
for _ in $(seq 100); do
  [[ $(ct exec c -- sh -c 'wc -l < /data/log' 2>/dev/null || echo 0) -ge 15 && -n $(ct exec c -- cat /data/holder.pid 2>/dev/null) ]] && break
  sleep 0.1
done
holder=$(ct exec c -- cat /data/holder.pid)
token=$(ct exec c -- cat /data/token)
[[ -n $holder && -n $token ]] || fail "the writer did not start"

img=$TMP/img
ct checkpoint c "$img"
[[ -f $img/inventory.img && -f $img/ploop-container.meta ]] || fail "checkpoint wrote no images"
[[ $(ct list | awk '$1 == "c" {print $2}') == stopped ]] || fail "checkpointed container still listed as $(ct list | awk '$1 == "c"')"
# Processes gone, disk unmounted, cgroups removed: the monitor's cleanup ran.
assert_no_leaks c
pgrep -f 'echo \$i \| md5sum' >/dev/null && fail "writer still running after checkpoint"

ct restore c "$img"
line=$(ct list | awk '$1 == "c"')
[[ $(awk '{print $2}' <<<"$line") == running ]] || fail "restored container not running: $line"
pid=$(awk '{print $3}' <<<"$line")
[[ -d /proc/$pid ]] || fail "list gives pid $pid, not a live process"
# The monitor stays the restored tree's parent (signals, cleanup, exit status).
mon=$(sed -n 's/^monitor_pid=//p' "$CTROOT/c/state")
[[ $(awk '{print $4}' "/proc/$pid/stat") == "$mon" ]] || fail "restored PID 1's parent is not the monitor $mon"
[[ $line == *200.0M* ]] || fail "memory limit not back after restore: $line"

before=$(ct exec c -- sh -c 'wc -l < /data/log')
sleep 1
ct exec c -- cat /data/log > "$TMP/log"
err=$(check_log "$((before + 5))" "$TMP/log") || fail "records after restore: $err"
# Same processes inside: PID 1 is the writer, the holder keeps its pid and
# the token it holds only in memory.
[[ $(ct exec c -- cat /data/pid) == 1 ]] || fail "writer's pid changed"
[[ $(ct exec c -- cat /proc/1/cmdline | tr '\0' ' ') == "/bin/sh -c mkdir -p /data"* ]] || fail "PID 1 is not the writer"
[[ $(ct exec c -- cat "/proc/$holder/cmdline" | tr '\0' ' ') == "/bin/sh -c t="* ]] || fail "holder $holder not there after restore"
ct exec c -- rm -f /data/token.now
sleep 0.5
[[ $(ct exec c -- cat /data/token.now) == "$token" ]] || fail "in-memory token lost"
# Output still reaches console.log.
n=$(grep -c '^tick' "$CTROOT/c/console.log")
sleep 0.5
[[ $(grep -c '^tick' "$CTROOT/c/console.log") -gt $n ]] || fail "restored container's output does not reach console.log"

# A running container cannot be restored over; checkpoint dirs are checked.
rc=0; ct restore c "$img" 2>/dev/null || rc=$?
[[ $rc -eq 4 ]] || fail "restore over a running container: exit $rc, want 4"
mkdir -p "$TMP/empty"
ct create d --size 64M
err=$(expect_fail ct restore d "$TMP/empty")
[[ $err == *"no ploop-container checkpoint"* ]] || fail "restore from an empty dir: $err"
# --criu names the binary; one that is too old counts as none.
printf '#!/bin/sh\necho "Version: 3.17.1"\n' > "$TMP/oldcriu"
chmod +x "$TMP/oldcriu"
err=$(expect_fail ct checkpoint c "$TMP/img2" --criu "$TMP/oldcriu")
[[ $err == *"3.17"*"4.2 or later"* ]] || fail "old CRIU: $err"
err=$(expect_fail ct checkpoint c "$TMP/img2" --criu "$TMP/nonexistent")
[[ $err == *"--criu $TMP/nonexistent"* ]] || fail "missing CRIU: $err"
[[ $(ct list | awk '$1 == "c" {print $2}') == running ]] || fail "refused checkpoints disturbed the container"
# --userns containers are refused before CRIU runs, and go on.
ct start d --userns -- /bin/sh -c 'while :; do sleep 1; done'
wait_running d
err=$(expect_fail ct checkpoint d "$TMP/img5")
[[ $err == *"--userns"*"not supported"* ]] || fail "userns checkpoint: $err"
[[ $(ct list | awk '$1 == "d" {print $2}') == running ]] || fail "refused userns checkpoint disturbed the container"
ct stop d --timeout 0

# --leave-running on a frozen container (as migrate does): it stays frozen,
# then thaws and goes on.
ct freeze c
ct checkpoint c "$TMP/img3" --leave-running
[[ $(ct list | awk '$1 == "c" {print $2}') == frozen ]] || fail "--leave-running thawed a frozen container"
ct thaw c
n=$(ct exec c -- sh -c 'wc -l < /data/log')
sleep 0.5
[[ $(ct exec c -- sh -c 'wc -l < /data/log') -gt $n ]] || fail "container does not run after --leave-running"

# Post-copy: the processes run before their memory is back, the lazy-pages
# daemon fills it; the verb returns once it is all there.
ct checkpoint c "$TMP/img4"
ct restore c "$TMP/img4" --lazy-pages
[[ $(ct list | awk '$1 == "c" {print $2}') == running ]] || fail "not running after a lazy restore"
[[ -z $(find "$TMP/img4" -name lazy-pages.pid) ]] || fail "lazy-pages daemon not done when restore returned"
ct exec c -- rm -f /data/token.now
sleep 0.5
[[ $(ct exec c -- cat /data/token.now) == "$token" ]] || fail "in-memory token lost in a lazy restore"
ct exec c -- cat /data/log > "$TMP/log"
err=$(check_log "$((before + 10))" "$TMP/log") || fail "records after a lazy restore: $err"

ct stop c --timeout 1
assert_no_leaks c
ct destroy c
ct destroy d
echo OK
