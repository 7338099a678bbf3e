# Shared helpers for tests/integration/migrate-*.sh (sourced after
# functions.sh and container-lib.bash). Two hosts on one machine: network
# namespaces migrate-a<N> (source) and migrate-b<N> (destination) joined by a
# veth pair with 10.213.<x>.1/30 and .2/30, each host with its own --root.
requires ip
requires nsenter
requires python3
requires e2fsck

SRC=$TMP/src
DST=$TMP/dst
CTROOT=$SRC  # container-lib's cleanup and helpers work on the source root
_mig_id=$(( ($$ % 9000) + 1000 ))
NS_A=migrate-a$_mig_id
NS_B=migrate-b$_mig_id
VETH_A=migrate-va$_mig_id
VETH_B=migrate-vb$_mig_id
_mig_net=$(( $$ % 250 + 1 ))
ADDR_A=10.213.$_mig_net.1
ADDR_B=10.213.$_mig_net.2
PORT=${MIGRATE_PORT:-21410}

src() { "$PLOOP_CONTAINER" --root "$SRC" "$@"; }
dst() { "$PLOOP_CONTAINER" --root "$DST" "$@"; }
in_a() { nsenter --net=/run/netns/"$NS_A" "$@"; }
in_b() { nsenter --net=/run/netns/"$NS_B" "$@"; }

_mig_net_down() {
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
  ip link del "$VETH_A" 2>/dev/null || true
}
_mig_ct_cleanup() {
  local root d n
  for root in "$SRC" "$DST"; do
    for d in "$root"/*/; do
      [[ -d $d ]] || continue
      n=$(basename "$d")
      "$PLOOP_CONTAINER" --root "$root" stop --timeout 0 "$n" >/dev/null 2>&1 || true
      "$PLOOP_CONTAINER" --root "$root" destroy "$n" >/dev/null 2>&1 || true
    done
  done
  "$PLOOP_CONTAINER" --root "$DST" receive --recover >/dev/null 2>&1 || true
  # a receiver killed while prepared leaves a mounted disk; recover unmounted it
}
cleanup _mig_ct_cleanup
cleanup _mig_net_down

mig_net_up() {
  _mig_net_down
  ip netns add "$NS_A"
  ip netns add "$NS_B"
  ip link add "$VETH_A" type veth peer name "$VETH_B"
  ip link set "$VETH_A" netns "$NS_A"
  ip link set "$VETH_B" netns "$NS_B"
  ip -n "$NS_A" addr add "$ADDR_A/30" dev "$VETH_A"
  ip -n "$NS_B" addr add "$ADDR_B/30" dev "$VETH_B"
  ip -n "$NS_A" link set lo up
  ip -n "$NS_B" link set lo up
  ip -n "$NS_A" link set "$VETH_A" up
  ip -n "$NS_B" link set "$VETH_B" up
}
mig_net_up

# The writer: appends "N md5(rec N)[0:8]" to /log, fsyncs it, then prints
# "ack N" on its stdout (the host's console.log): an ack means the record is
# durable. Started again after a restart, it goes on from the last record.
WRITER='i=0; [ -s /log ] && i=$(tail -n 1 /log | cut -d" " -f1); while true; do i=$((i+1)); s=$(echo "rec $i" | md5sum | cut -c1-8); echo "$i $s" >> /log; sync /log; echo "ack $i"; done'

# start_writer NAME: a container on the source running the writer; the test
# keeps following its console (tail survives the source's removal) in $TMP/acks.
start_writer() {
  src create "$1" --size "${2:-256M}" >/dev/null
  src start "$1" --memory 64M -- /bin/sh -c "$WRITER"
  [[ -z ${_tail_pid:-} ]] || kill "$_tail_pid" 2>/dev/null || true
  tail -n +1 -f "$SRC/$1/console.log" >"$TMP/acks" 2>/dev/null &
  _tail_pid=$!
  cleanup "kill $_tail_pid 2>/dev/null || true"
  local i
  for i in $(seq 100); do grep -q '^ack 20$' "$TMP/acks" 2>/dev/null && return 0; sleep 0.1; done
  fail "writer in $1 did not start"
}

# check_log FILE: prints the number of records; fails unless the file is a
# contiguous run 1..M of records with valid checksums (a last line cut short
# by the stop is tolerated only when nothing follows it).
check_log() {
  python3 - "$1" <<'EOF'
import hashlib, sys
lines = open(sys.argv[1], 'rb').read().split(b'\n')
if lines and lines[-1] == b'':
    lines.pop()
n = 0
for k, l in enumerate(lines, 1):
    parts = l.split(b' ')
    want = hashlib.md5(b'rec %d\n' % k).hexdigest()[:8].encode()
    if len(parts) != 2 or parts[0] != str(k).encode() or parts[1] != want:
        if k == len(lines):
            break
        sys.exit('record %d is bad: %r' % (k, l[:40]))
    n = k
print(n)
EOF
}

last_ack() { grep -a '^ack ' "$TMP/acks" | tail -n 1 | cut -d' ' -f2; }

# start_receiver [ROOT-ARGS...]: `receive --once` in the destination netns;
# its pid in $RECV_PID, output in $TMP/recv.out/err.
start_receiver() {
  local listen=${1:-$ADDR_B:$PORT}
  : >"$TMP/recv.out"
  # A wrapper outside our job table (a killed job would print "Killed" into
  # whatever stderr the test has then) records the receiver's pid and status.
  rm -f "$TMP/recv.pid" "$TMP/recv.rc"
  # $RECV_ARGS: more receive options (word-split), e.g. --auth FILE
  setsid -f sh -c 'nsenter --net=/run/netns/"$1" "$2" --root "$3" receive --listen "$4" --once --timeout "$5" $7 \
    >"$6/recv.out" 2>"$6/recv.err" & echo $! >"$6/recv.pid.tmp"; mv "$6/recv.pid.tmp" "$6/recv.pid"; wait $!; echo $? >"$6/recv.rc.tmp"; mv "$6/recv.rc.tmp" "$6/recv.rc"' \
    sh "$NS_B" "$PLOOP_CONTAINER" "$DST" "$listen" "${MIG_TIMEOUT:-5}" "$TMP" "${RECV_ARGS:-}" 2>/dev/null
  local j
  for j in $(seq 100); do [[ -s $TMP/recv.pid ]] && break; sleep 0.05; done
  RECV_PID=$(cat "$TMP/recv.pid")
  cleanup "kill -9 $RECV_PID 2>/dev/null || true"
  local i
  for i in $(seq 100); do grep -q receiving "$TMP/recv.out" && return 0; sleep 0.05; done
  fail "receiver did not start: $(cat "$TMP/recv.err")"
}

# start_relay OFFSET [TRIGGER]: the bit-flipping relay in the destination
# netns, in front of the receiver; migrations go through it.
start_relay() {
  local rport=$((PORT + 10))
  in_b python3 "$TOP/tests/integration/migrate-relay.py" "$ADDR_B:$rport" "$ADDR_B:$PORT" "$1" \
    ${2:+--trigger "$2"} >"$TMP/relay.out" 2>&1 &
  cleanup "kill $! 2>/dev/null || true"
  MIG_TARGET=$ADDR_B:$rport
  local i
  for i in $(seq 100); do grep -q relaying "$TMP/relay.out" && return 0; sleep 0.05; done
  fail "relay did not start: $(cat "$TMP/relay.out")"
}

# migrate NAME [ARGS...]: from the source netns to the receiver.
migrate() {
  local name=$1
  shift
  in_a "$PLOOP_CONTAINER" --root "$SRC" migrate "$name" "${MIG_TARGET:-$ADDR_B:$PORT}" --timeout "${MIG_TIMEOUT:-5}" "$@"
}

state_of() { "$PLOOP_CONTAINER" --root "$1" list | awk -v n="$2" '$1 == n {print $2}'; }

# Images in the disk's descriptor (1 = no snapshot left).
n_images() { "$PLOOP" snapshot-list -H -o uuid "$1" | grep -c .; }

# assert_source_intact NAME IMAGES: after a failed migration the source runs
# on (not frozen), with its records intact and growing, no snapshot of the
# migration left, and no migration record.
assert_source_intact() {
  local name=$1 images=$2 n1 n2
  [[ $(state_of "$SRC" "$name") == running ]] || fail "source $name is $(state_of "$SRC" "$name"), not running"
  [[ ! -e $SRC/$name/migration ]] || fail "migration record left on the source: $(cat "$SRC/$name/migration")"
  [[ $(n_images "$SRC/$name/disk") -eq $images ]] ||
    fail "temporary snapshots left on the source: $("$PLOOP" snapshot-list "$SRC/$name/disk")"
  local ack
  n1=$(check_log "$SRC/$name/rootfs/log") || fail "source log broken"
  sleep 0.5
  ack=$(last_ack)  # before the log: every ack printed by now is in it
  n2=$(check_log "$SRC/$name/rootfs/log") || fail "source log broken"
  ((n2 > n1)) || fail "the writer on the source does not go on ($n1 -> $n2)"
  ((n2 >= ack)) || fail "acknowledged record $ack is not in the source's log ($n2)"
}

# assert_dest_empty NAME: nothing of NAME on the destination: files, mounts,
# daemons, loop devices.
assert_dest_empty() {
  local name=$1
  [[ ! -e $DST/$name ]] || fail "destination kept $DST/$name: $(ls -la "$DST/$name")"
  if grep -q "$DST/$name" /proc/mounts; then fail "destination mounts left"; fi
  if losetup -a | grep -q "$DST/$name/"; then fail "destination loop devices left"; fi
  if pgrep -f "ploop-nbd.*$DST/$name/" >/dev/null; then fail "destination daemon left"; fi
}

# wait_receiver: the receiver's exit status (it ends after one migration).
wait_receiver() {
  local i
  for i in $(seq 600); do [[ -s $TMP/recv.rc ]] && break; sleep 0.1; done
  [[ -s $TMP/recv.rc ]] || fail "the receiver did not end"
  cat "$TMP/recv.rc"
}

# fault_case PHASE HOOK [MIGRATE ARGS...]: a migration of web whose hook
# (run by the source at PHASE) causes a real fault; it must fail with one
# line and not "in doubt". The receiver's exit status goes to $RECV_RC.
fault_case() {
  local phase=$1 hook=$2 rc=0
  shift 2
  start_receiver
  PLOOP_MIGRATE_HOOK_PHASE=$phase PLOOP_MIGRATE_HOOK=$hook migrate web --min-round 0 --max-rounds 3 "$@" \
    >"$TMP/out" 2>"$TMP/err" || rc=$?
  ((rc != 0)) || fail "$phase: migrate succeeded despite the fault: $(cat "$TMP/out")"
  ((rc != 5)) || fail "$phase: in doubt, though COMMIT was never sent: $(cat "$TMP/err")"
  [[ $(grep -c . "$TMP/err") -eq 1 ]] || fail "$phase: expected one line, got: $(cat "$TMP/err")"
  echo "$phase: source said: $(cat "$TMP/err")"; echo "   receiver said: $(cat "$TMP/recv.err")"
  RECV_RC=$(wait_receiver)
}
