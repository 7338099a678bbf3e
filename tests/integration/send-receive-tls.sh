#!/usr/bin/env bash
# ploop send --to / ploop receive --listen over TLS: a pre-shared key and
# X.509 (with --tls-verify-peer and a client certificate) carry a stream
# that exports byte for byte like the source; a wrong key, a sender without
# a certificate under --tls-verify-peer, a plaintext sender to a TLS
# receiver and an untrusted receiver certificate all fail with one line and
# leave no disk; bad option combinations are refused.
. "$(dirname "$0")/functions.sh"
requires certtool
requires psktool
[[ -x $PLOOP ]] || skip "ploop not built"
export PLOOP_NO_PROGRESS=1
PORT=21150

mkdir -p "$TMP/psk" "$TMP/bad" "$TMP/ca" "$TMP/srv" "$TMP/cli" "$TMP/nocert" "$TMP/src"
psktool -u alice -p "$TMP/psk/keys.psk" >/dev/null 2>&1
psktool -u alice -p "$TMP/bad/keys.psk" >/dev/null 2>&1
certtool --generate-privkey --outfile "$TMP/ca/ca-key.pem" >/dev/null 2>&1
printf '%s\n' "cn = ploop test CA" ca cert_signing_key "expiration_days = 2" >"$TMP/ca.info"
certtool --generate-self-signed --load-privkey "$TMP/ca/ca-key.pem" --template "$TMP/ca.info" \
  --outfile "$TMP/ca/ca-cert.pem" >/dev/null 2>&1
gen() { # DIR NAME LINES...
  local dir=$1 name=$2
  shift 2
  printf '%s\n' "$@" "expiration_days = 2" >"$TMP/$name.info"
  certtool --generate-privkey --outfile "$dir/$name-key.pem" >/dev/null 2>&1
  certtool --generate-certificate --load-ca-certificate "$TMP/ca/ca-cert.pem" \
    --load-ca-privkey "$TMP/ca/ca-key.pem" --load-privkey "$dir/$name-key.pem" \
    --template "$TMP/$name.info" --outfile "$dir/$name-cert.pem" >/dev/null 2>&1
}
gen "$TMP/srv" server "cn = localhost" "ip_address = 127.0.0.1" tls_www_server encryption_key signing_key
gen "$TMP/cli" client "cn = sender" tls_www_client encryption_key signing_key
for d in srv cli nocert; do cp "$TMP/ca/ca-cert.pem" "$TMP/$d/"; done

head -c 5M /dev/urandom >"$TMP/src.raw"
truncate -s 32M "$TMP/src.raw"
$PLOOP import "$TMP/src.raw" "$TMP/src" >/dev/null

# transfer NAME RECV-ARGS -- SEND-ARGS: receive into $TMP/NAME; sets rrc, src (exit codes)
transfer() {
  local name=$1
  shift
  local rargs=() sargs=()
  while [[ $1 != -- ]]; do rargs+=("$1"); shift; done
  shift
  sargs=("$@")
  PORT=$((PORT + 1))
  $PLOOP receive --listen 127.0.0.1:$PORT "${rargs[@]}" "$TMP/r-$name" >"$TMP/recv.out" 2>"$TMP/recv.err" &
  local rpid=$!
  cleanup "kill $rpid 2>/dev/null"
  for _ in $(seq 50); do
    python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', $PORT))" 2>/dev/null || break
    sleep 0.1
  done
  src=0
  timeout 60 $PLOOP send --to 127.0.0.1:$PORT "${sargs[@]}" "$TMP/src" >"$TMP/send.out" 2>"$TMP/send.err" || src=$?
  rrc=0
  wait $rpid || rrc=$?
}
same() { # NAME: the received disk exports like the source
  $PLOOP export -f -o "$TMP/out.raw" "$TMP/r-$1" >/dev/null
  [[ $(sum "$TMP/out.raw") == $(sum "$TMP/src.raw") ]] || fail "$1: received disk differs"
}
refused() { # NAME WHY: both ends failed, one line from each, no disk left
  [[ $src -ne 0 && $rrc -ne 0 ]] || fail "$2: send rc=$src receive rc=$rrc"
  [[ $(grep -c . "$TMP/recv.err") -eq 1 ]] || fail "$2: receive said: $(cat "$TMP/recv.err")"
  [[ $(grep -c . "$TMP/send.err") -eq 1 ]] || fail "$2: send said: $(cat "$TMP/send.err")"
  [[ ! -e $TMP/r-$1/DiskDescriptor.xml ]] || fail "$2: a disk was left in $TMP/r-$1"
}

transfer psk --tls-psk "$TMP/psk/keys.psk" -- --tls-psk "$TMP/psk/keys.psk"
[[ $src -eq 0 && $rrc -eq 0 ]] || fail "PSK transfer: $(cat "$TMP/send.err" "$TMP/recv.err")"
same psk

transfer x509 --tls-certificates "$TMP/srv" --tls-verify-peer -- --tls-certificates "$TMP/cli"
[[ $src -eq 0 && $rrc -eq 0 ]] || fail "X.509 transfer: $(cat "$TMP/send.err" "$TMP/recv.err")"
same x509

transfer wrongkey --tls-psk "$TMP/psk/keys.psk" -- --tls-psk "$TMP/bad/keys.psk"
refused wrongkey "wrong key"
transfer nocert --tls-certificates "$TMP/srv" --tls-verify-peer -- --tls-certificates "$TMP/nocert"
refused nocert "sender without a certificate"
transfer plain --tls-psk "$TMP/psk/keys.psk" --
refused plain "plaintext sender"
mkdir -p "$TMP/otherca"
certtool --generate-privkey --outfile "$TMP/ca/ca2-key.pem" >/dev/null 2>&1
certtool --generate-self-signed --load-privkey "$TMP/ca/ca2-key.pem" --template "$TMP/ca.info" \
  --outfile "$TMP/otherca/ca-cert.pem" >/dev/null 2>&1
transfer untrusted --tls-certificates "$TMP/srv" -- --tls-certificates "$TMP/otherca"
refused untrusted "receiver certificate from another CA"

# Option combinations: one line, usage exit code, nothing made.
rc=0; expect_fail $PLOOP send --tls-psk "$TMP/psk/keys.psk" -o "$TMP/x.stream" "$TMP/src" >/dev/null
expect_fail $PLOOP send --to 127.0.0.1:21199 --tls-verify-peer --tls-certificates "$TMP/cli" "$TMP/src" >/dev/null
expect_fail $PLOOP receive --listen 127.0.0.1:21199 --tls-psk "$TMP/psk/keys.psk" \
  --tls-certificates "$TMP/srv" "$TMP/y" >/dev/null
expect_fail $PLOOP receive --listen 127.0.0.1:21199 --tls-psk "$TMP/nope.psk" "$TMP/y" >/dev/null
[[ ! -e $TMP/x.stream && ! -e $TMP/y ]] || fail "a refused command made files"
echo PASS
