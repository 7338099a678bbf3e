#!/usr/bin/env bash
# Migration of a container whose disk is in Ceph to a host that sees the
# same pool: no disk bytes move, the disk's lock does. Two hosts = two
# roots on this machine, each naming the pool with its own copy of the
# Ceph configuration; the migration runs over 127.0.0.1. A writer appends
# fsync'ed numbered records: every acknowledged one arrives. The
# destination then holds the disk (the source cannot open it read-write);
# a destination killed before COMMIT leaves the source running with its
# data (the destination's daemon fenced).
source "$(dirname "$0")/functions.sh"
RBD_PORT=21570 # the cluster: 21570-21589; migration 21590, ploop-nbd 21591
source "$(dirname "$0")/rbd-lib.bash"
rbd_cluster_start 1
MIGRATE_PORT=21590
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"
_mig_net_down # the two hosts share this host's 127.0.0.1 (the cluster is there)
CONF_B=$TMP/ceph-b.conf
cp "$CONF" "$CONF_B"
ADDR=127.0.0.1:21590

start_receiver() {
  : >"$TMP/recv.out"
  rm -f "$TMP/recv.pid" "$TMP/recv.rc"
  setsid -f sh -c 'CEPH_CONF="$5" "$1" --root "$2" receive --listen "$3" --once --timeout 10 \
    >"$4/recv.out" 2>"$4/recv.err" & echo $! >"$4/recv.pid.tmp"; mv "$4/recv.pid.tmp" "$4/recv.pid"; wait $!; echo $? >"$4/recv.rc.tmp"; mv "$4/recv.rc.tmp" "$4/recv.rc"' \
    sh "$PLOOP_CONTAINER" "$DST" "$ADDR" "$TMP" "$CONF_B" 2>/dev/null
  local j
  for j in $(seq 100); do [[ -s $TMP/recv.pid ]] && break; sleep 0.05; done
  RECV_PID=$(cat "$TMP/recv.pid")
  cleanup "kill -9 $RECV_PID 2>/dev/null || true"
  for j in $(seq 100); do grep -q receiving "$TMP/recv.out" && return 0; sleep 0.05; done
  fail "receiver did not start: $(cat "$TMP/recv.err")"
}
migrate() { local n=$1; shift; timeout 120 "$PLOOP_CONTAINER" --root "$SRC" migrate "$n" "$ADDR" --timeout 10 "$@"; }
# rbd_writer NAME DISK: the writer of migrate-lib in a container on DISK.
rbd_writer() {
  src create "$1" --size 64M --disk "$2" >/dev/null || fail "create $1 on $2"
  src start "$1" --memory 64M -- /bin/sh -c "$WRITER"
  [[ -z ${_tail_pid:-} ]] || kill "$_tail_pid" 2>/dev/null || true
  tail -n +1 -f "$SRC/$1/console.log" >"$TMP/acks" 2>/dev/null &
  _tail_pid=$!
  cleanup "kill $_tail_pid 2>/dev/null || true"
  local i
  for i in $(seq 100); do grep -q '^ack 20$' "$TMP/acks" 2>/dev/null && return 0; sleep 0.1; done
  fail "writer in $1 did not start"
}

D1="rbd:rbd/mig1?conf=$CONF"
rbd_writer web "$D1"
start_receiver
migrate web --json --no-criu >"$TMP/out.json" 2>"$TMP/err" || fail "migrate failed: $(cat "$TMP/err") / $(cat "$TMP/recv.err")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
cat "$TMP/out.json"
python3 - "$TMP/out.json" <<'PY' || fail "bad --json output"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["shared_disk"] is True, o
assert o["rounds"] == [], o["rounds"]          # no disk stream at all
assert o["bytes_sent"] < 64 << 10, o            # only the protocol's messages
assert 0 < o["downtime_ms"] < o["total_ms"], o
assert o["criu"] is False and o["criu_bytes"] == 0, o
assert 0 < o["acquire_ms"] < o["downtime_ms"], o
print("downtime %.1f ms (acquire %.1f ms, opened ahead: %s), %d bytes on the wire, phases %s" % (
    o["downtime_ms"], o["acquire_ms"], o["acquire_ahead"], o["bytes_sent"], o["phases_ms"]))
PY
sleep 0.3
kill "$_tail_pid"
acked=$(last_ack)
[[ ! -e $SRC/web ]] || fail "the source kept web: $(ls "$SRC/web")"
[[ $(state_of "$DST" web) == running ]] || fail "web does not run on the destination"
grep -qx "disk=rbd:rbd/mig1?conf=$CONF_B" "$DST/web/config" || fail "destination config: $(cat "$DST/web/config")"
grep -qx "disk_created=1" "$DST/web/config" || fail "the right to remove the disk did not move"
rbd ls rbd | grep -qx 'mig1.root.hds' || fail "the source's destroy removed the shared disk"
m=$(check_log "$DST/web/rootfs/log") || fail "destination log broken"
((m >= acked)) || fail "record $acked was acknowledged before the freeze, the destination has $m"
sleep 1
m2=$(check_log "$DST/web/rootfs/log") || fail "destination log broken"
((m2 > m)) || fail "the writer does not go on at the destination ($m -> $m2)"
# One writer: the destination holds the disk, the source's name of it cannot open it read-write.
err=$(expect_fail timeout 60 "$PLOOP_NBD" -p 21591 "x=$D1")
[[ $err == *"locked by"* ]] || fail "the source could open the migrated disk: $err"
wait_state_root() { local i; for i in $(seq 100); do [[ $(state_of "$1" "$2") == "$3" ]] && return 0; sleep 0.1; done; return 1; }
dst stop web --timeout 2 >/dev/null 2>&1
wait_state_root "$DST" web stopped || fail "web did not stop at the destination"
m3=$(timeout 60 "$PLOOP" export -o "$TMP/web.raw" "rbd:rbd/mig1" >/dev/null && debugfs -R 'cat /log' "$TMP/web.raw" 2>/dev/null | python3 -c 'import sys; print(len(sys.stdin.read().splitlines()))')
((m3 >= m2)) || fail "the pool holds $m3 records, the destination wrote $m2"
dst destroy web
rbd ls rbd | grep -q '^mig1\.' && fail "destroy at the destination left the disk it now owns"
echo "online: ok ($acked acked, $m2 records at the destination)"

# The top opened ahead found stale at ACQUIRE (PLOOP_PREOPEN=stale makes
# the size check fail as the race it guards against would): the daemon
# falls back to the full open and nothing is lost.
rbd_writer h "rbd:rbd/mig6?conf=$CONF"
PLOOP_PREOPEN=stale start_receiver
migrate h --json --no-criu >"$TMP/stale.json" 2>"$TMP/err" || fail "migrate with a stale open ahead failed: $(cat "$TMP/err") / $(cat "$TMP/recv.err")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
python3 -c 'import json, sys; o = json.load(open(sys.argv[1])); assert o["shared_disk"] and o["acquire_ahead"] is False, o' \
  "$TMP/stale.json" || fail "the stale open ahead was used: $(cat "$TMP/stale.json")"
sleep 0.3
kill "$_tail_pid"
acked=$(last_ack)
[[ $(state_of "$DST" h) == running ]] || fail "h does not run on the destination"
m=$(check_log "$DST/h/rootfs/log") || fail "destination log broken (stale open ahead)"
((m >= acked)) || fail "record $acked was acknowledged before the freeze, the destination has $m (stale open ahead)"
dst stop h --timeout 2 >/dev/null 2>&1
wait_state_root "$DST" h stopped || fail "h did not stop at the destination"
dst destroy h
echo "stale open ahead: fell back to the full open ($acked acked, $m records)"

# With CRIU (when a working one can be had): the processes move, not a
# restart (the writer's token stays), still no disk bytes.
if "$TOP/scripts/install-criu.sh" >/dev/null 2>&1; then
  MEM_WRITER='t=$(head -c 8 /dev/urandom | md5sum | cut -c1-16); i=0; while :; do i=$((i+1)); echo "$i $t" >> /log; sync /log; echo "ack $i $t"; sleep 0.02; done'
  src create mem --size 64M --disk "rbd:rbd/mig3?conf=$CONF" >/dev/null || fail "create mem"
  src start mem --memory 64M -- /bin/sh -c "$MEM_WRITER"
  for _ in $(seq 100); do grep -q '^ack 20 ' "$SRC/mem/console.log" 2>/dev/null && break; sleep 0.1; done
  token=$(awk '$1 == "ack" {print $3; exit}' "$SRC/mem/console.log")
  [[ -n $token ]] || fail "mem's writer did not start"
  start_receiver
  migrate mem --json >"$TMP/criu.json" 2>"$TMP/err" || fail "migrate with CRIU failed: $(cat "$TMP/err") / $(cat "$TMP/recv.err")"
  [[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
  python3 - "$TMP/criu.json" <<'PY' || fail "bad --json output with CRIU: $(cat "$TMP/criu.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["shared_disk"] is True and o["rounds"] == [], o
assert o["criu"] is True, o
assert o["bytes_sent"] < o["criu_bytes"] + (64 << 10), o   # the images and the messages, no disk
print("with CRIU: downtime %.1f ms, %d bytes of images, %d on the wire" % (o["downtime_ms"], o["criu_bytes"], o["bytes_sent"]))
PY
  [[ $(state_of "$DST" mem) == running ]] || fail "mem does not run on the destination"
  sleep 0.5
  awk -v tok="$token" '$2 != tok {bad=1} END {exit bad}' "$DST/mem/rootfs/log" ||
    fail "the writer was restarted, not restored (a new token in the log)"
  n=$(wc -l <"$DST/mem/rootfs/log")
  sleep 0.5
  (($(wc -l <"$DST/mem/rootfs/log") > n)) || fail "the restored writer does not go on"
  dst stop mem --timeout 2 >/dev/null 2>&1
  wait_state_root "$DST" mem stopped || fail "mem did not stop"
  dst destroy mem
  echo "criu: ok"
else
  echo "criu: skipped (no working CRIU)"
fi

# A destination killed after READY, before COMMIT: the source takes its
# disk back (fencing the destination's daemon) and runs on with its data.
# Until COMMIT the destination must not mount the disk (a mount writes the
# superblock and journal under a source that may roll back): at READY it
# is not mounted there, and the disk's bytes past the header page (where
# ACQUIRE sets the in-use mark) are those the source released.
rbd_writer f "rbd:rbd/mig2?conf=$CONF"
start_receiver
cat >"$TMP/hook.sh" <<EOF
img_hash() { timeout 60 rbd export --no-progress rbd/mig2.root.hds - 2>/dev/null | tail -c +4097 | md5sum; }
case \$PLOOP_MIGRATE_PHASE in
handover) img_hash >"$TMP/hash.released" ;;
ready)
  ! grep -q " $DST/f/rootfs " /proc/mounts || touch "$TMP/mounted.early"
  img_hash >"$TMP/hash.ready"
  kill -9 $RECV_PID ;;
esac
EOF
rm -f "$TMP/mounted.early" "$TMP/hash.released" "$TMP/hash.ready"
rc=0
PLOOP_MIGRATE_HOOK_PHASE=handover,ready PLOOP_MIGRATE_HOOK="bash $TMP/hook.sh" migrate f --no-criu \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ ! -e $TMP/mounted.early ]] || fail "the destination mounted the shared disk before COMMIT"
[[ -s $TMP/hash.released && -s $TMP/hash.ready ]] || fail "the hook did not hash the disk"
cmp -s "$TMP/hash.released" "$TMP/hash.ready" || fail "the destination wrote the shared disk before COMMIT"
! grep -q '^d41d8cd98f00b204e9800998ecf8427e' "$TMP/hash.ready" || fail "the hook read an empty disk"

((rc != 0)) || fail "migrate succeeded though the destination was killed: $(cat "$TMP/out")"
((rc != 6)) || fail "in doubt, though COMMIT was never sent: $(cat "$TMP/err")"
echo "killed destination: source said: $(cat "$TMP/err")"
[[ ! -e $SRC/f/migration ]] || fail "migration record left on the source"
[[ $(state_of "$SRC" f) == running ]] || fail "f is $(state_of "$SRC" f) on the source, not running"
n1=$(check_log "$SRC/f/rootfs/log") || fail "source log broken"
sleep 0.5
ack=$(last_ack)
n2=$(check_log "$SRC/f/rootfs/log") || fail "source log broken"
((n2 > n1)) || fail "the writer on the source does not go on ($n1 -> $n2)"
((n2 >= ack)) || fail "acknowledged record $ack is not in the source's log ($n2)"
timeout 60 "$PLOOP_CONTAINER" --root "$DST" receive --recover >/dev/null 2>&1 || true
[[ ! -e $DST/f ]] || fail "the destination kept f after --recover"
src stop f --timeout 2 >/dev/null 2>&1
wait_state_root "$SRC" f stopped || fail "f did not stop"
timeout 60 "$PLOOP" check "rbd:rbd/mig2?conf=$CONF" >/dev/null || fail "check of the disk after the rollback"
src destroy f

# In doubt: COMMIT sent, the destination stopped (SIGSTOP) around reading
# it, then killed. The source stays frozen with its disk released; `migrate
# --resolve` asks a new receiver. Not committed there: the copy there is
# discarded (letting the disk go) and the source takes its disk back and
# runs on. Committed: the source's copy goes and the disk there holds every
# acknowledged record. Never both.
rbd_writer g "rbd:rbd/mig4?conf=$CONF"
start_receiver
rc=0
PLOOP_MIGRATE_HOOK_PHASE=commit PLOOP_MIGRATE_HOOK="kill -STOP $RECV_PID" migrate g --no-criu --timeout 3 \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 6 ]] || fail "in doubt: exit $rc, not 6: $(cat "$TMP/err")"
[[ $(state_of "$SRC" g) == frozen ]] || fail "in doubt: the source is $(state_of "$SRC" g), not frozen"
kill -9 "$RECV_PID"
wait_receiver >/dev/null
acked=$(last_ack)
start_receiver
timeout 60 "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve g --timeout 5 >"$TMP/resolve" 2>&1
kill -9 "$RECV_PID"
if grep -q aborted "$TMP/resolve"; then
  [[ $(state_of "$SRC" g) == running ]] || fail "g is $(state_of "$SRC" g) after the abort, not running"
  [[ ! -e $DST/g ]] || fail "the destination kept g"
  n1=$(check_log "$SRC/g/rootfs/log") || fail "source log broken"
  sleep 0.5
  ack=$(last_ack)
  n2=$(check_log "$SRC/g/rootfs/log") || fail "source log broken"
  ((n2 > n1)) || fail "the writer does not go on after the resolve ($n1 -> $n2)"
  ((n2 >= ack)) || fail "acknowledged record $ack is not in the source's log ($n2)"
  src stop g --timeout 2 >/dev/null 2>&1
  wait_state_root "$SRC" g stopped || fail "g did not stop"
  src destroy g
  echo "in doubt, not committed: resolved by asking (aborted)"
elif grep -q committed "$TMP/resolve"; then
  [[ ! -e $SRC/g ]] || fail "the source kept g after a committed resolve"
  dst stop g --timeout 2 >/dev/null 2>&1 || true
  wait_state_root "$DST" g stopped || fail "g did not stop at the destination"
  # killed between its commit record and the start, the receiver left the
  # disk mounted for a start that never came
  timeout 60 "$PLOOP_CONTAINER" --root "$DST" umount g >"$TMP/umount.out" 2>&1 || true
  "$PLOOP" list | grep -q 'rbd/mig4' &&
    fail "g's disk is still attached at the destination: $("$PLOOP" list); umount said: $(cat "$TMP/umount.out")"
  timeout 60 "$PLOOP" export -o "$TMP/g.raw" "rbd:rbd/mig4" >/dev/null || fail "export of g's disk"
  debugfs -R 'cat /log' "$TMP/g.raw" 2>/dev/null >"$TMP/g.log"
  n=$(check_log "$TMP/g.log") || fail "g's log broken"
  ((n >= acked)) || fail "acknowledged record $acked is not on g's disk ($n)"
  dst destroy g
  echo "in doubt, committed: resolved by asking (committed)"
else
  fail "resolve: $(cat "$TMP/resolve") / $(cat "$TMP/recv.err")"
fi

# `umount NAME` detaches a disk attached but mounted nowhere (what a
# destination killed between COMMIT and the start leaves); `ploop umount`
# finds a disk attached with ?conf= by its bare name too.
src create u --size 64M --disk "rbd:rbd/mig5?conf=$CONF" >/dev/null || fail "create u"
timeout 60 "$PLOOP" mount "rbd:rbd/mig5?conf=$CONF" >/dev/null || fail "attach u's disk"
timeout 60 "$PLOOP_CONTAINER" --root "$SRC" umount u || fail "umount of an attached, unmounted disk"
"$PLOOP" list | grep -q 'rbd/mig5' && fail "umount left u's disk attached: $("$PLOOP" list)"
timeout 60 "$PLOOP" mount "rbd:rbd/mig5?conf=$CONF" >/dev/null || fail "attach u's disk again"
timeout 60 "$PLOOP" umount "rbd:rbd/mig5" || fail "ploop umount by the bare rbd name"
"$PLOOP" list | grep -q 'rbd/mig5' && fail "ploop umount left the disk attached: $("$PLOOP" list)"
src destroy u
echo "umount of an attached, unmounted disk: ok"
echo PASS
