#!/usr/bin/env bash
# The in-doubt window: COMMIT sent, the answer lost. The source stays
# frozen (never two running copies), exits 6, and `migrate --resolve`
# settles it: by asking the destination, or by the operator's word. A
# source killed after PREPARE (its committing record already durable) stays
# frozen as well, and --resolve learns from the destination to abort.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"
MIG_TIMEOUT=3

in_doubt() {  # PHASE: cut the link at PHASE; the migration must end in doubt
  local rc=0
  start_receiver
  PLOOP_MIGRATE_HOOK_PHASE=$1 PLOOP_MIGRATE_HOOK="ip link set $VETH_A down" migrate web \
    >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 6 ]] || fail "$1: exit $rc, not 6 (in doubt): $(cat "$TMP/err")"
  [[ $(grep -c . "$TMP/err") -eq 1 ]] || fail "$1: expected one line: $(cat "$TMP/err")"
  grep -q "in doubt" "$TMP/err" || fail "$1: does not say in doubt: $(cat "$TMP/err")"
  [[ $(state_of "$SRC" web) == frozen ]] || fail "$1: the source is $(state_of "$SRC" web), not frozen"
  grep -q "phase=committing" "$SRC/web/migration" || fail "$1: no durable committing record"
  expect_fail src thaw web >/dev/null  # thawing by hand would risk two copies
  [[ $(state_of "$SRC" web) == frozen ]] || fail "$1: thaw was not refused"
}

# 1. COMMIT reached the destination, its answer did not come back.
start_writer web
in_doubt commit
[[ $(wait_receiver) -eq 0 ]] || fail "the destination did not commit: $(cat "$TMP/recv.err")"
[[ $(state_of "$DST" web) == running ]] || fail "the destination does not run web"
# unreachable: no guess, the operator must decide
err=$(expect_fail in_a "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve web --timeout 2)
[[ $err == *--commit* ]] || fail "resolve does not say how to decide: $err"
[[ $(state_of "$SRC" web) == frozen ]] || fail "a failed resolve changed the source"
ip -n "$NS_A" link set "$VETH_A" up
start_receiver  # answers the query
in_a "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve web | grep -q committed || fail "resolve did not commit"
kill -9 "$RECV_PID"
kill "$_tail_pid"
acked=$(last_ack)
[[ ! -e $SRC/web ]] || fail "the source kept web after resolving"
m=$(check_log "$DST/web/rootfs/log") || fail "destination log broken"
((m >= acked)) || fail "record $acked acknowledged, the destination has $m"
dst stop web --timeout 1
dst destroy web
echo "committed in doubt: resolved by asking"

# 2. COMMIT never reached the destination: it discards, the source resumes.
start_writer web
in_doubt ready
[[ $(wait_receiver) -ne 0 ]] || fail "the destination committed without COMMIT"
assert_dest_empty web
ip -n "$NS_A" link set "$VETH_A" up
start_receiver
in_a "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve web | grep -q aborted || fail "resolve did not abort"
kill -9 "$RECV_PID"
assert_source_intact web 1
echo "not committed in doubt: resolved by asking"

# 3. The operator's --abort, nobody to ask.
in_doubt ready
wait_receiver >/dev/null
ip -n "$NS_A" link set "$VETH_A" up
in_a "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve web --abort | grep -q aborted || fail "--abort did not abort"
assert_source_intact web 1
assert_dest_empty web
echo "operator abort: ok"

# 4. The source killed after PREPARE, before COMMIT: its durable record says
# committing, so the container stays frozen; the destination never got
# COMMIT, discards, and --resolve (asking it) resumes the source.
start_receiver
rc=0
PLOOP_MIGRATE_HOOK_PHASE=prepare PLOOP_MIGRATE_HOOK='kill -9 $PPID' migrate web --no-criu \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 137 ]] || fail "prepare: the source was not killed (exit $rc): $(cat "$TMP/err")"
[[ $(state_of "$SRC" web) == frozen ]] || fail "prepare: the source is $(state_of "$SRC" web), not frozen"
grep -q "phase=committing" "$SRC/web/migration" || fail "prepare: no durable committing record"
expect_fail src thaw web >/dev/null
[[ $(wait_receiver) -ne 0 ]] || fail "the destination committed without COMMIT"
assert_dest_empty web
start_receiver  # answers the query
in_a "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve web | grep -q aborted || fail "resolve did not abort"
kill -9 "$RECV_PID"
assert_source_intact web 1
echo "source killed after PREPARE: resolved by asking"
