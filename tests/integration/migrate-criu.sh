#!/usr/bin/env bash
# Live migration with CRIU between two roots (two network namespaces): a
# process whose state lives only in memory (a counter and a random token
# drawn at its start) moves to the destination and goes on there with the
# same counter and token: nothing restarted it. Its acknowledged records
# are all on the destination's disk, the source keeps nothing, the
# migration's sockets are not left open in the restored container's
# monitor, and the restored processes sit in the container's own cgroup.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
out=$("$TOP/scripts/install-criu.sh" 2>&1) || skip "no working CRIU could be provided: $(tail -1 <<<"$out")"
source "$(dirname "$0")/migrate-lib.bash"

# "N TOKEN" per record; the token is drawn once, the counter is a shell variable.
MEM_WRITER='t=$(head -c 8 /dev/urandom | md5sum | cut -c1-16); i=0; while :; do i=$((i+1)); echo "$i $t" >> /log; sync /log; echo "ack $i $t"; sleep 0.02; done'
src create mem --size 128M >/dev/null
src start mem --memory 64M -- /bin/sh -c "$MEM_WRITER"
tail -n +1 -f "$SRC/mem/console.log" >"$TMP/acks" 2>/dev/null &
_tail_pid=$!
cleanup "kill $_tail_pid 2>/dev/null || true"
for i in $(seq 100); do grep -q '^ack 20 ' "$TMP/acks" 2>/dev/null && break; sleep 0.1; done
grep -q '^ack 20 ' "$TMP/acks" || fail "writer did not start"
token=$(awk '$1 == "ack" {print $3; exit}' "$TMP/acks")

# $1: log file; prints its last number; fails unless 1..N contiguous, one token.
check_mem_log() {
  awk -v tok="$2" '{ if ($1 != NR || $2 != tok) { print "line " NR ": " $0 " (token " tok ")" > "/dev/stderr"; exit 1 } n = $1 }
    END { print n }' "$1"
}

start_receiver
migrate mem --json >"$TMP/out.json" 2>"$TMP/err" || fail "migrate failed: $(cat "$TMP/err") / $(cat "$TMP/recv.err")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
cat "$TMP/out.json"
python3 - "$TMP/out.json" <<'PY' || fail "bad --json output (CRIU not used?)"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["criu"] is True, o
assert o["criu_bytes"] > 0, o
p = o["phases_ms"]
assert p["checkpoint"] > 0 and p["dest_start"] > 0, p
assert 0 < o["downtime_ms"] < o["total_ms"], o
PY
sleep 0.5
kill "$_tail_pid"
acked=$(grep -a '^ack ' "$TMP/acks" | tail -n 1 | cut -d' ' -f2)
[[ ! -e $SRC/mem ]] || fail "the source kept mem"
[[ $(state_of "$DST" mem) == running ]] || fail "mem does not run on the destination"
n1=$(check_mem_log "$DST/mem/rootfs/log" "$token") || fail "destination log: not one counter and one token"
((n1 >= acked)) || fail "record $acked acknowledged before the freeze, the destination has $n1"
sleep 1
n2=$(check_mem_log "$DST/mem/rootfs/log" "$token") || fail "destination log: the process restarted (counter or token changed)"
((n2 > n1)) || fail "the restored writer does not go on ($n1 -> $n2)"
grep -a "^ack $((acked + 1)) $token" "$DST/mem/console.log" >/dev/null ||
  fail "the restored process does not print to the destination's console.log"

# The restored tree is in the container's own cgroup, not left in the monitor's or the root one.
pid=$(awk '$1 == "mem" {print $3}' <(dst list))
[[ -d /proc/$pid ]] || fail "list gives pid $pid, not a live process"
# (every hierarchy the launcher uses, the controller-less v2 one of a hybrid host included)
outside=$(grep -v -e ':name=' -e ':devices:' /proc/"$pid"/cgroup | grep -v '/mem$' || true)
[[ -z $outside ]] || fail "restored PID 1 is outside the container's groups: $outside"
# No migration socket left in the monitor (nor anywhere on the destination) once the receiver ended.
mon=$(sed -n 's/^monitor_pid=//p' "$DST/mem/state")
if ls -l /proc/"$mon"/fd 2>/dev/null | grep -q socket; then
  ss -tanp 2>/dev/null | grep -q "pid=$mon," && fail "the monitor keeps a TCP socket: $(ss -tanp | grep "pid=$mon,")"
fi
in_b ss -Htn state established | grep -q ":$PORT " &&
  fail "a connection on the migration port is still open: $(in_b ss -tnp state established)"
dst stop mem --timeout 2
dst destroy mem
echo "criu: ok ($acked acked, counter $n2, token $token)"
