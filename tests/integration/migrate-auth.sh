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
