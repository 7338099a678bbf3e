#!/usr/bin/env bash
# receive --auth / migrate --auth: a source without the token, or with
# another one, is refused with one line before the destination creates
# anything, and the container stays as it was at the source; a source with
# --auth refuses a destination that does not check it; the same token on
# both sides migrates. Bad token files are refused at the door.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"

printf 'correct horse battery staple 1\n' >"$TMP/tok"
printf 'correct horse battery staple 2\n' >"$TMP/other"
printf 'short\n' >"$TMP/short"
printf 'readable by all, long enough\n' >"$TMP/open"
chmod 600 "$TMP/tok" "$TMP/other" "$TMP/short"
chmod 644 "$TMP/open"

start_writer web 64M
src stop web --timeout 2  # a cold copy: quick, and the same handshake

# refused: no token, wrong token (destination side), destination without --auth (source side)
for case in none wrong unchecked; do
  case $case in
    none) RECV_ARGS="--auth $TMP/tok"; args=() ;;
    wrong) RECV_ARGS="--auth $TMP/tok"; args=(--auth "$TMP/other") ;;
    unchecked) RECV_ARGS=""; args=(--auth "$TMP/tok") ;;
  esac
  start_receiver
  err=$(expect_fail migrate web "${args[@]}")
  echo "$case: $err"
  case $case in
    none) [[ $err == *"give --auth"* || $err == *"no --auth token"* ]] || fail "$case: wrong reason: $err" ;;
    wrong) [[ $err == *authentication* ]] || fail "$case: wrong reason: $err" ;;
    unchecked) [[ $err == *"does not check --auth"* ]] || fail "$case: wrong reason: $err" ;;
  esac
  wait_receiver >/dev/null || true
  [[ ! -e $DST/web ]] || fail "$case: the destination created $DST/web"
  [[ $(state_of "$SRC" web) == stopped ]] || fail "$case: the source's web is $(state_of "$SRC" web)"
  [[ ! -e $SRC/web/migration ]] || fail "$case: migration record left at the source"
done

# bad token files: refused before connecting
for f in short open "missing"; do
  err=$(expect_fail src migrate web "$ADDR_B:$PORT" --auth "$TMP/$f")
  [[ $err == *--auth* ]] || fail "token file $f: $err"
  err=$(expect_fail dst receive --listen "127.0.0.1:$((PORT + 1))" --auth "$TMP/$f")
  [[ $err == *--auth* ]] || fail "token file $f (receive): $err"
done

# accepted: the same token on both sides
RECV_ARGS="--auth $TMP/tok"
start_receiver
migrate web --auth "$TMP/tok" >"$TMP/out" 2>&1 || fail "migrate with the right token failed: $(cat "$TMP/out") / $(cat "$TMP/recv.err")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
[[ ! -e $SRC/web ]] || fail "the source kept web"
[[ $(state_of "$DST" web) == stopped ]] || fail "web is not on the destination"
echo "auth: ok"

# --resolve of a migration made with --auth: the query and the answer carry
# proofs, so neither a listener with another token nor a querier without
# the right one settles anything.
dst destroy web
start_writer web 64M  # running: the destination's start outlasts the cut
RECV_ARGS="--auth $TMP/tok"
start_receiver
rc=0
PLOOP_MIGRATE_HOOK_PHASE=commit PLOOP_MIGRATE_HOOK="ip link set $VETH_A down" migrate web --auth "$TMP/tok" --no-criu \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 6 ]] || fail "in doubt: exit $rc, not 6: $(cat "$TMP/err")"
[[ $(wait_receiver) -eq 0 ]] || fail "the destination did not commit: $(cat "$TMP/recv.err")"
grep -q '^auth=1$' "$SRC/web/migration" || fail "the record does not say --auth: $(cat "$SRC/web/migration")"
ip -n "$NS_A" link set "$VETH_A" up
resolve() { in_a "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve web --timeout 3 "$@"; }
err=$(expect_fail resolve)
[[ $err == *"give --auth"* ]] || fail "resolve without --auth: $err"
RECV_ARGS=""
start_receiver  # answers "committed" without a proof
err=$(expect_fail resolve --auth "$TMP/tok")
[[ $err == *"destination failed authentication"* ]] || fail "an unproven answer was taken: $err"
[[ -e $SRC/web/migration && -e $SRC/web ]] || fail "a failed resolve changed the source"
kill -9 "$RECV_PID"
RECV_ARGS="--auth $TMP/tok"
start_receiver
err=$(expect_fail resolve --auth "$TMP/other")
[[ $err == *authentication* ]] || fail "a querier with another token got an answer: $err"
[[ -e $SRC/web/migration ]] || fail "a refused query changed the source"
resolve --auth "$TMP/tok" | grep -q committed || fail "resolve with the token did not commit"
kill -9 "$RECV_PID"
[[ ! -e $SRC/web ]] || fail "the source kept web after resolving"
[[ $(state_of "$DST" web) == running ]] || fail "the destination does not run web"
dst stop web --timeout 1 >/dev/null
echo "resolve with auth: ok"
