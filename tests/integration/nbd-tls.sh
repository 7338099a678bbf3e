#!/usr/bin/env bash
# ploop-nbd over TLS (STARTTLS) with real clients and their own TLS options:
# nbdinfo/nbdcopy (nbds:// URIs, tls-psk-file / tls-certificates) and
# qemu-img (tls-creds-psk / tls-creds-x509 objects), pre-shared keys and
# X.509 certificates made here with psktool/certtool, --tls-verify-peer with
# and without a client certificate, a wrong key, plaintext clients under
# --tls=require, --idle-timeout over TLS, a clean TLS close (close_notify)
# at the client's disconnect, and the warning for a plaintext
# export on a non-loopback address.  Data is compared byte for byte.
. "$(dirname "$0")/functions.sh"
requires nbdinfo
requires nbdcopy
requires qemu-img
requires certtool
requires psktool
requires python3
[[ -x $PLOOP && -x $PLOOP_NBD ]] || skip "ploop / ploop-nbd not built"

PORT=21100
mkdir -p "$TMP/disk" "$TMP/srv" "$TMP/cli" "$TMP/nocert" "$TMP/psk" "$TMP/badpsk" "$TMP/other"
$PLOOP init -t none -s 64M "$TMP/disk/root.hds" >/dev/null
head -c 6M /dev/urandom >"$TMP/src.raw"
truncate -s 64M "$TMP/src.raw"
dd if=/dev/urandom of="$TMP/src.raw" bs=1M count=2 seek=40 conv=notrunc status=none

# ---- credentials -------------------------------------------------------
psktool -u alice -p "$TMP/psk/keys.psk" >/dev/null 2>&1
psktool -u alice -p "$TMP/badpsk/keys.psk" >/dev/null 2>&1
cmp -s "$TMP/psk/keys.psk" "$TMP/badpsk/keys.psk" && fail "psktool made the same key twice"
grep -qE '^alice:[0-9a-f]{32,}$' "$TMP/psk/keys.psk" || fail "psktool format: $(cat "$TMP/psk/keys.psk")"

gen_cert() { # DIR NAME TEMPLATE-LINES...: NAME-key.pem, NAME-cert.pem signed by the CA
  local dir=$1 name=$2
  shift 2
  printf '%s\n' "$@" "expiration_days = 2" >"$TMP/$name.info"
  certtool --generate-privkey --outfile "$dir/$name-key.pem" >/dev/null 2>&1
  certtool --generate-certificate --load-ca-certificate "$TMP/ca/ca-cert.pem" \
    --load-ca-privkey "$TMP/ca/ca-key.pem" --load-privkey "$dir/$name-key.pem" \
    --template "$TMP/$name.info" --outfile "$dir/$name-cert.pem" >/dev/null 2>&1
}
mkdir -p "$TMP/ca" "$TMP/ca2"
certtool --generate-privkey --outfile "$TMP/ca/ca-key.pem" >/dev/null 2>&1
printf '%s\n' "cn = ploop test CA" ca cert_signing_key "expiration_days = 2" >"$TMP/ca.info"
certtool --generate-self-signed --load-privkey "$TMP/ca/ca-key.pem" --template "$TMP/ca.info" \
  --outfile "$TMP/ca/ca-cert.pem" >/dev/null 2>&1
gen_cert "$TMP/srv" server "cn = localhost" "dns_name = localhost" "ip_address = 127.0.0.1" \
  tls_www_server encryption_key signing_key
gen_cert "$TMP/cli" client "cn = ploop test client" tls_www_client encryption_key signing_key
cp "$TMP/ca/ca-cert.pem" "$TMP/srv/"
cp "$TMP/ca/ca-cert.pem" "$TMP/cli/"
cp "$TMP/ca/ca-cert.pem" "$TMP/nocert/"
# A client certificate from another CA: must not pass --tls-verify-peer.
certtool --generate-privkey --outfile "$TMP/ca2/ca-key.pem" >/dev/null 2>&1
certtool --generate-self-signed --load-privkey "$TMP/ca2/ca-key.pem" --template "$TMP/ca.info" \
  --outfile "$TMP/ca2/ca-cert.pem" >/dev/null 2>&1
cp "$TMP/ca/ca-cert.pem" "$TMP/other/"
certtool --generate-privkey --outfile "$TMP/other/client-key.pem" >/dev/null 2>&1
certtool --generate-certificate --load-ca-certificate "$TMP/ca2/ca-cert.pem" \
  --load-ca-privkey "$TMP/ca2/ca-key.pem" --load-privkey "$TMP/other/client-key.pem" \
  --template "$TMP/client.info" --outfile "$TMP/other/client-cert.pem" >/dev/null 2>&1
[[ -s $TMP/srv/server-cert.pem && -s $TMP/cli/client-cert.pem && -s $TMP/other/client-cert.pem ]] ||
  fail "certtool made no certificates"

# ---- server helpers ----------------------------------------------------
SPID=
start() { # ARGS...: ploop-nbd on 127.0.0.1:$PORT, log in $TMP/server.log
  PORT=$((PORT + 1))
  $PLOOP_NBD -p $PORT -b 127.0.0.1 "$@" "$TMP/disk" 2>"$TMP/server.log" &
  SPID=$!
  cleanup "kill $SPID 2>/dev/null; wait $SPID 2>/dev/null"
  for _ in $(seq 50); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1).close()" 2>/dev/null && return
    kill -0 $SPID 2>/dev/null || break
    sleep 0.1
  done
  fail "server did not start: $(cat "$TMP/server.log")"
}
stop() {
  kill $SPID
  wait $SPID || fail "server exited with an error: $(cat "$TMP/server.log")"
}
alive() { kill -0 $SPID 2>/dev/null || fail "server died: $(cat "$TMP/server.log")"; }

# ---- bad option combinations: one line, exit 1 ------------------------
expect_fail $PLOOP_NBD -p 21199 --tls=require "$TMP/disk" | grep -q "needs --tls-psk" || fail "no credentials"
expect_fail $PLOOP_NBD -p 21199 --tls=maybe "$TMP/disk" >/dev/null
expect_fail $PLOOP_NBD -p 21199 --tls-psk "$TMP/psk/keys.psk" "$TMP/disk" | grep -q "add --tls" ||
  fail "credentials without --tls accepted"
expect_fail $PLOOP_NBD -p 21199 --tls=on --tls-psk "$TMP/nope.psk" "$TMP/disk" >/dev/null
echo "not a key" >"$TMP/bad.psk"
expect_fail $PLOOP_NBD -p 21199 --tls=on --tls-psk "$TMP/bad.psk" "$TMP/disk" | grep -q "bad.psk:1" ||
  fail "malformed key file"
expect_fail $PLOOP_NBD -p 21199 --tls=on --tls-certificates "$TMP/nocert" "$TMP/disk" >/dev/null
expect_fail $PLOOP_NBD -p 21199 --tls=on --tls-psk "$TMP/psk/keys.psk" --tls-verify-peer "$TMP/disk" >/dev/null

# ---- PSK, --tls=require -------------------------------------------------
start --tls=require --tls-psk "$TMP/psk/keys.psk"
U="nbds://alice@127.0.0.1:$PORT/disk?tls-psk-file=$TMP/psk/keys.psk"
[[ $(nbdinfo --size "$U") == 67108864 ]] || fail "nbdinfo over TLS-PSK"
nbdcopy --flush "$TMP/src.raw" "$U"
nbdcopy "$U" "$TMP/back.raw"
[[ $(sum "$TMP/back.raw") == $(sum "$TMP/src.raw") ]] || fail "nbdcopy round trip over TLS-PSK differs"
nbdcopy -C 4 -R 16 "$U" "$TMP/back4.raw"
cmp "$TMP/src.raw" "$TMP/back4.raw" || fail "nbdcopy with 4 TLS connections differs"
# A clean disconnect ends with the server's close_notify: libnbd (whose own
# debug output names a truncated session) sees no unclean TLS close.
for client in "nbdinfo --size $U" "nbdcopy -v -C 2 $U $TMP/back2.raw"; do
  LIBNBD_DEBUG=1 $client >/dev/null 2>"$TMP/libnbd.debug" || fail "$client: $(tail -3 "$TMP/libnbd.debug")"
  grep -q "nbd_shutdown" "$TMP/libnbd.debug" || fail "$client: no libnbd debug output"
  if grep -i "non-properly terminated" "$TMP/libnbd.debug"; then fail "$client: unclean TLS close"; fi
done
QPSK=(--object "tls-creds-psk,id=tls0,endpoint=client,dir=$TMP/psk,username=alice")
qemu-img compare "${QPSK[@]}" --image-opts \
  "driver=nbd,host=127.0.0.1,port=$PORT,export=disk,tls-creds=tls0" \
  "driver=raw,file.driver=file,file.filename=$TMP/src.raw" >/dev/null ||
  fail "qemu-img compare over TLS-PSK"
# qemu writes over TLS too; read back with libnbd.
head -c 1M /dev/urandom >"$TMP/q.raw"
qemu-img convert -n "${QPSK[@]}" --target-image-opts -f raw "$TMP/q.raw" \
  "driver=nbd,host=127.0.0.1,port=$PORT,export=disk,tls-creds=tls0"
nbdcopy "$U" "$TMP/qback.raw"
cmp -n 1048576 "$TMP/qback.raw" "$TMP/q.raw" || fail "qemu-img write over TLS not read back"
dd if="$TMP/q.raw" of="$TMP/src.raw" conv=notrunc status=none

# A wrong key, an unknown identity, and plaintext clients are refused.
nbdinfo --size "nbds://alice@127.0.0.1:$PORT/disk?tls-psk-file=$TMP/badpsk/keys.psk" >/dev/null 2>&1 &&
  fail "wrong key accepted"
sed 's/^alice:/mallory:/' "$TMP/psk/keys.psk" >"$TMP/mallory.psk"
nbdinfo --size "nbds://mallory@127.0.0.1:$PORT/disk?tls-psk-file=$TMP/mallory.psk" >/dev/null 2>&1 &&
  fail "unknown identity accepted"
nbdinfo --size "nbd://127.0.0.1:$PORT/disk" >/dev/null 2>&1 && fail "plaintext client served under require"
out=$(nbdinfo --list "nbd://127.0.0.1:$PORT/" 2>&1) && fail "plaintext list served under require"
grep -q disk <<<"$out" && fail "export names leaked to a plaintext client: $out"
# Option by option: everything but STARTTLS gets ERR_TLS_REQD and no name.
python3 - "$PORT" <<'EOF' || fail "plaintext options under --tls=require"
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)
def recv(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise SystemExit("server closed early")
        b += c
    return b
recv(18); s.sendall(struct.pack(">I", 1))
def opt(o, data=b""):
    s.sendall(struct.pack(">QII", 0x49484156454F5054, o, len(data)) + data)
    magic, oo, rep, ln = struct.unpack(">QIII", recv(20))
    return rep, recv(ln)
for o, d in ((3, b""), (6, struct.pack(">I", 4) + b"disk" + struct.pack(">H", 0)),
             (7, struct.pack(">I", 0) + struct.pack(">H", 0)), (8, b""), (10, b"")):
    rep, data = opt(o, d)
    assert rep == 0x80000005, "option %d: reply 0x%x" % (o, rep)
    assert b"disk" not in data, "option %d leaked the name" % o
rep, _ = opt(2)
assert rep == 1
EOF
alive
stop

# ---- X.509, --tls=on: TLS and plaintext clients both served ------------
start --tls=on --tls-certificates "$TMP/srv"
UX="nbds://127.0.0.1:$PORT/disk?tls-certificates=$TMP/cli"
[[ $(nbdinfo --size "$UX") == 67108864 ]] || fail "nbdinfo over TLS-X.509"
[[ $(nbdinfo --size "nbd://127.0.0.1:$PORT/disk") == 67108864 ]] || fail "--tls=on refused plaintext"
nbdcopy "$UX" "$TMP/backx.raw"
cmp "$TMP/src.raw" "$TMP/backx.raw" || fail "nbdcopy over TLS-X.509 differs"
QX=(--object "tls-creds-x509,id=tls0,endpoint=client,dir=$TMP/nocert")
qemu-img compare "${QX[@]}" --image-opts \
  "driver=nbd,host=127.0.0.1,port=$PORT,export=disk,tls-creds=tls0" \
  "driver=raw,file.driver=file,file.filename=$TMP/src.raw" >/dev/null ||
  fail "qemu-img compare over TLS-X.509"
# A client that does not trust the server's CA stops at the handshake.
mkdir -p "$TMP/wrongca" && cp "$TMP/ca2/ca-cert.pem" "$TMP/wrongca/"
nbdinfo --size "nbds://127.0.0.1:$PORT/disk?tls-certificates=$TMP/wrongca" >/dev/null 2>&1 &&
  fail "client trusted a server certificate from another CA"
alive
stop

# ---- X.509 --tls-verify-peer: client certificates ----------------------
start --tls=require --tls-certificates "$TMP/srv" --tls-verify-peer -v
UX="nbds://127.0.0.1:$PORT/disk?tls-certificates=$TMP/cli"
[[ $(nbdinfo --size "$UX") == 67108864 ]] || fail "client certificate refused: $(cat "$TMP/server.log")"
grep -q "TLS established with x509:.*ploop test client" "$TMP/server.log" ||
  fail "peer not logged: $(cat "$TMP/server.log")"
nbdinfo --size "nbds://127.0.0.1:$PORT/disk?tls-certificates=$TMP/nocert" >/dev/null 2>&1 &&
  fail "verify-peer served a client without a certificate"
nbdinfo --size "nbds://127.0.0.1:$PORT/disk?tls-certificates=$TMP/other" >/dev/null 2>&1 &&
  fail "verify-peer served a certificate from another CA"
qemu-img compare --object "tls-creds-x509,id=tls0,endpoint=client,dir=$TMP/cli" --image-opts \
  "driver=nbd,host=127.0.0.1,port=$PORT,export=disk,tls-creds=tls0" \
  "driver=raw,file.driver=file,file.filename=$TMP/src.raw" >/dev/null ||
  fail "qemu-img with a client certificate"
qemu-img info "${QX[@]}" --image-opts \
  "driver=nbd,host=127.0.0.1,port=$PORT,export=disk,tls-creds=tls0" >/dev/null 2>&1 &&
  fail "qemu-img without a client certificate served"
alive
stop

# ---- --idle-timeout over TLS: an idle TLS client is cut ------------------
start --tls=require --tls-certificates "$TMP/srv" --idle-timeout 1
python3 - "$PORT" "$TMP/cli" <<'EOF' || fail "idle TLS client"
import socket, ssl, struct, sys, time
port, d = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port), 5)
def recv(sock, n):
    b = b""
    while len(b) < n:
        c = sock.recv(n - len(b))
        if not c: return None
        b += c
    return b
recv(s, 18); s.sendall(struct.pack(">I", 1))
s.sendall(struct.pack(">QII", 0x49484156454F5054, 5, 0))
assert struct.unpack(">QIII", recv(s, 20))[2] == 1, "STARTTLS not acked"
ctx = ssl.create_default_context(cafile=d + "/ca-cert.pem")
ctx.load_cert_chain(d + "/client-cert.pem", d + "/client-key.pem")
t = ctx.wrap_socket(s, server_hostname="127.0.0.1")
t.sendall(struct.pack(">QII", 0x49484156454F5054, 7, 6) + struct.pack(">IH", 0, 0))
while True:  # INFO replies, then ACK
    magic, o, rep, ln = struct.unpack(">QIII", recv(t, 20))
    recv(t, ln)
    if rep == 1: break
    assert rep == 3, "GO failed: 0x%x" % rep
t.settimeout(10)
start = time.time()
try:
    gone = t.recv(1) == b""
except (ConnectionError, ssl.SSLError):
    gone = True
took = time.time() - start
assert gone and took < 8, "idle client not disconnected (%.1f s)" % took
EOF
grep -q "sent no request for 1 s" "$TMP/server.log" || fail "idle timeout not logged: $(cat "$TMP/server.log")"
alive
stop

# ---- the warning for plaintext beyond loopback --------------------------
# In a network namespace of our own with a documentation address on its
# loopback device: nothing listens on the host's real network.
if [[ $(id -u) -eq 0 ]] && command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
  warn() { # ARGS...: the server's stderr for half a second on 192.0.2.1
    unshare -n bash -c '
      ip link set lo up && ip addr add 192.0.2.1/32 dev lo || exit 3
      "$@" 2>&1 & p=$!; sleep 0.5; kill $p; wait $p' _ $PLOOP_NBD -p 21198 -b 192.0.2.1 "$@" "$TMP/disk"
  }
  out=$(warn)
  [[ $(grep -c "192.0.2.1 port 21198 without TLS" <<<"$out") -eq 1 ]] || fail "no warning: $out"
  out=$(warn --tls=require --tls-psk "$TMP/psk/keys.psk")
  grep -q "without TLS" <<<"$out" && fail "warning printed with TLS: $out"
fi
start
grep -q "without TLS" "$TMP/server.log" && fail "warning printed for loopback"
stop
echo "PASS"
