#!/usr/bin/env bash
# migrate / receive --listen over TLS (--no-criu, live rounds): a pre-shared
# key together with --auth, and X.509 with --tls-verify-peer and a client
# certificate, carry a migration whose data arrives intact (the link idles
# for seconds in between); a cut link still fails and rolls back; the
# in-doubt case is resolved over TLS. Refused
# with one line, the source running on and nothing at the destination: a
# plaintext source to a TLS receiver, a wrong key, a source without a
# certificate, an untrusted receiver, a TLS source to a plaintext receiver.
# --tls=on also serves a plaintext source; bad combinations are refused.
export MIGRATE_PORT=21510
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"
requires certtool
requires psktool
MIG_TIMEOUT=5

mkdir -p "$TMP/psk" "$TMP/bad" "$TMP/ca" "$TMP/srv" "$TMP/cli" "$TMP/nocert" "$TMP/otherca"
psktool -u alice -p "$TMP/psk/keys.psk" >/dev/null 2>&1
psktool -u alice -p "$TMP/bad/keys.psk" >/dev/null 2>&1
printf '%s\n' "cn = ploop test CA" ca cert_signing_key "expiration_days = 2" >"$TMP/ca.info"
certtool --generate-privkey --outfile "$TMP/ca/ca-key.pem" >/dev/null 2>&1
certtool --generate-self-signed --load-privkey "$TMP/ca/ca-key.pem" --template "$TMP/ca.info" \
  --outfile "$TMP/ca/ca-cert.pem" >/dev/null 2>&1
certtool --generate-privkey --outfile "$TMP/ca/ca2-key.pem" >/dev/null 2>&1
certtool --generate-self-signed --load-privkey "$TMP/ca/ca2-key.pem" --template "$TMP/ca.info" \
  --outfile "$TMP/otherca/ca-cert.pem" >/dev/null 2>&1
gen() { # DIR NAME LINES...
  local dir=$1 name=$2
  shift 2
  printf '%s\n' "$@" "expiration_days = 2" >"$TMP/$name.info"
  certtool --generate-privkey --outfile "$dir/$name-key.pem" >/dev/null 2>&1
  certtool --generate-certificate --load-ca-certificate "$TMP/ca/ca-cert.pem" \
    --load-ca-privkey "$TMP/ca/ca-key.pem" --load-privkey "$dir/$name-key.pem" \
    --template "$TMP/$name.info" --outfile "$dir/$name-cert.pem" >/dev/null 2>&1
}
# the destination is reached as $ADDR_B: its certificate must name it
gen "$TMP/srv" server "cn = destination" "ip_address = $ADDR_B" tls_www_server encryption_key signing_key
gen "$TMP/cli" client "cn = source" tls_www_client encryption_key signing_key
for d in srv cli nocert; do cp "$TMP/ca/ca-cert.pem" "$TMP/$d/"; done
printf 'correct horse battery staple 1\n' >"$TMP/tok"
chmod 600 "$TMP/tok"

# moved NAME MD5: NAME runs at the destination with every acknowledged
# record and its data file intact, and nothing of it stays at the source.
moved() {
  local name=$1 want=$2 acked m
  [[ $(wait_receiver) -eq 0 ]] || fail "$name: receiver failed: $(cat "$TMP/recv.err")"
  sleep 0.3
  kill "$_tail_pid"
  acked=$(last_ack)
  [[ ! -e $SRC/$name ]] || fail "$name: the source kept it"
  [[ $(state_of "$DST" "$name") == running ]] || fail "$name does not run at the destination"
  m=$(check_log "$DST/$name/rootfs/log") || fail "$name: destination log broken"
  ((m >= acked)) || fail "$name: record $acked was acknowledged, the destination has $m"
  [[ $(md5sum "$DST/$name/rootfs/data" | cut -d' ' -f1) == "$want" ]] || fail "$name: data file differs"
  dst stop "$name" --timeout 2
  dst destroy "$name"
}
writer_with_data() { # NAME: sets $want to the data file's md5
  start_writer "$1" 128M
  src exec "$1" -- /bin/sh -c 'dd if=/dev/urandom of=/data bs=1M count=12 2>/dev/null; sync /data'
  want=$(md5sum "$SRC/$1/rootfs/data" | cut -d' ' -f1)
}

# PSK and --auth together; the hook keeps the link idle for 3 s mid-round.
writer_with_data web
RECV_ARGS="--tls-psk $TMP/psk/keys.psk --auth $TMP/tok"
start_receiver
PLOOP_MIGRATE_HOOK_PHASE=round1 PLOOP_MIGRATE_HOOK="sleep 3" \
  migrate web --no-criu --min-round 0 --max-rounds 3 --tls-psk "$TMP/psk/keys.psk" --auth "$TMP/tok" \
  >"$TMP/out" 2>&1 || fail "PSK migrate failed: $(cat "$TMP/out") / $(cat "$TMP/recv.err")"
moved web "$want"
echo "psk + auth: ok"

# X.509, both ways checked.
writer_with_data web
RECV_ARGS="--tls-certificates $TMP/srv --tls-verify-peer"
start_receiver
migrate web --no-criu --json --tls-certificates "$TMP/cli" >"$TMP/out" 2>&1 ||
  fail "X.509 migrate failed: $(cat "$TMP/out") / $(cat "$TMP/recv.err")"
moved web "$want"
python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print("x509: ok: downtime %.0f ms, total %.0f ms, %d bytes" % (o["downtime_ms"], o["total_ms"], o["bytes_sent"]))' "$TMP/out"

# Refusals: one line from each side, the source runs on, nothing there.
start_writer web 64M
refused() { # CASE WANT-IN-SOURCE-ERROR WANT-IN-RECEIVER-ERROR MIGRATE-ARGS...
  local case=$1 want_src=$2 want_recv=$3 err rrc
  shift 3
  start_receiver
  err=$(expect_fail migrate web --no-criu "$@")
  echo "$case: $err"; echo "   receiver: $(cat "$TMP/recv.err")"
  [[ $err == *$want_src* ]] || fail "$case: source said: $err"
  rrc=$(wait_receiver)
  [[ $rrc -ne 0 ]] || fail "$case: the receiver succeeded"
  [[ $(grep -c . "$TMP/recv.err") -eq 1 ]] || fail "$case: receiver said: $(cat "$TMP/recv.err")"
  grep -q -- "$want_recv" "$TMP/recv.err" || fail "$case: receiver said: $(cat "$TMP/recv.err")"
  assert_dest_empty web
  assert_source_intact web 1
}
RECV_ARGS="--tls-psk $TMP/psk/keys.psk"
refused plaintext "TLS required" "TLS required"
refused wrongkey TLS TLS --tls-psk "$TMP/bad/keys.psk"
RECV_ARGS="--tls-certificates $TMP/srv --tls-verify-peer"
refused nocert TLS TLS --tls-certificates "$TMP/nocert"
RECV_ARGS="--tls-certificates $TMP/srv"
refused untrusted TLS TLS --tls-certificates "$TMP/otherca"
RECV_ARGS=""
refused plain-receiver "" "speaks TLS" --tls-psk "$TMP/psk/keys.psk"
echo "refusals: ok"

# A cut link under TLS is still a failure both sides see, and rolls back.
RECV_ARGS="--tls-psk $TMP/psk/keys.psk"
src exec web -- /bin/sh -c 'dd if=/dev/urandom of=/data bs=1M count=12 2>/dev/null; sync /data'
fault_case round1 "ip link set $VETH_A down" --no-criu --tls-psk "$TMP/psk/keys.psk"
ip -n "$NS_A" link set "$VETH_A" up
[[ $RECV_RC -eq 1 ]] || fail "cut link: receiver exit $RECV_RC: $(cat "$TMP/recv.err")"
assert_dest_empty web
assert_source_intact web 1
echo "cut link: ok"

# In doubt under TLS (the link cut after COMMIT): a plaintext --resolve is
# refused by the TLS receiver; over TLS it asks, and commits.
RECV_ARGS="--tls-psk $TMP/psk/keys.psk"
start_receiver
rc=0
PLOOP_MIGRATE_HOOK_PHASE=commit PLOOP_MIGRATE_HOOK="ip link set $VETH_A down" \
  migrate web --no-criu --tls-psk "$TMP/psk/keys.psk" >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 6 ]] || fail "in doubt: exit $rc, not 6: $(cat "$TMP/err")"
[[ $(wait_receiver) -eq 0 ]] || fail "the destination did not commit: $(cat "$TMP/recv.err")"
[[ $(state_of "$SRC" web) == frozen ]] || fail "in doubt: the source is $(state_of "$SRC" web)"
ip -n "$NS_A" link set "$VETH_A" up
start_receiver
err=$(expect_fail in_a "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve web --timeout 5)
[[ $err == *"TLS required"* ]] || fail "plaintext resolve: $err"
wait_receiver >/dev/null || true
[[ $(state_of "$SRC" web) == frozen ]] || fail "a refused resolve changed the source"
start_receiver
in_a "$PLOOP_CONTAINER" --root "$SRC" migrate --resolve web --tls-psk "$TMP/psk/keys.psk" >"$TMP/out" 2>&1 ||
  fail "TLS resolve failed: $(cat "$TMP/out")"
grep -q committed "$TMP/out" || fail "TLS resolve did not commit: $(cat "$TMP/out")"
kill -9 "$RECV_PID"
[[ ! -e $SRC/web ]] || fail "the source kept web after resolving"
[[ $(state_of "$DST" web) == running ]] || fail "web does not run at the destination"
dst stop web --timeout 1
dst destroy web
echo "in doubt: resolved over TLS"

# --tls=on: a plaintext source is served too (a cold copy: quick).
start_writer web 64M
kill "$_tail_pid"
src stop web --timeout 2
RECV_ARGS="--tls=on --tls-psk $TMP/psk/keys.psk"
start_receiver
migrate web >"$TMP/out" 2>&1 || fail "plaintext to --tls=on failed: $(cat "$TMP/out") / $(cat "$TMP/recv.err")"
[[ $(wait_receiver) -eq 0 ]] || fail "--tls=on receiver failed: $(cat "$TMP/recv.err")"
[[ $(state_of "$DST" web) == stopped ]] || fail "web is not on the destination"
echo "tls=on: ok"

# Bad combinations and files: refused before connecting, usage exit code.
usage() {
  local rc=0
  expect_fail "$@" >/dev/null
  "$@" >/dev/null 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || fail "exit $rc, not 2: $*"
}
src create solo --size 64M >/dev/null
usage src migrate solo "$ADDR_B:$PORT" --tls-verify-peer --tls-certificates "$TMP/cli"
usage src migrate solo "$ADDR_B:$PORT" --tls-psk "$TMP/psk/keys.psk" --tls-certificates "$TMP/cli"
usage src migrate solo "$ADDR_B:$PORT" --tls=off --tls-psk "$TMP/psk/keys.psk"
usage src migrate solo "$ADDR_B:$PORT" --tls=require
usage src migrate solo "$ADDR_B:$PORT" --tls=maybe --tls-psk "$TMP/psk/keys.psk"
usage src migrate solo "$ADDR_B:$PORT" --tls-psk "$TMP/nope.psk"
usage dst receive --listen "127.0.0.1:$((PORT + 1))" --tls-psk "$TMP/nope.psk"
usage dst receive --listen "127.0.0.1:$((PORT + 1))" --tls-verify-peer --tls-psk "$TMP/psk/keys.psk"
usage dst receive --recover --tls-psk "$TMP/psk/keys.psk"
[[ $(state_of "$SRC" solo) == stopped && ! -e $SRC/solo/migration ]] || fail "a refused migrate touched solo"
echo PASS
