#!/usr/bin/env bash
# A full pool: an rbd disk served by ploop-nbd is written cluster by
# cluster until Ceph says the pool is full. Every write ploop-nbd
# acknowledged reads back; the others got NBD ENOSPC (one log line each)
# and left zeros; the server lives on, `ploop import` into the full pool
# fails with one line, and once the pool has room again writes go on and
# `ploop check` is clean.
source "$(dirname "$0")/functions.sh"
RBD_PORT=21784 # 16 ports (one mon, one OSD): 21784-21799
source "$(dirname "$0")/rbd-lib.bash"
CEPH_DIR=$TMP/ceph
cleanup "'$TOP/scripts/ceph-cluster.sh' stop '$CEPH_DIR'"
# Memstore does not refuse writes past its size; the full ratio set low
# below makes the pool full at 48 MiB, far from the OSD's own last-resort
# cut-off (97% of 256 MiB, where requests are dropped, not answered).
CONF=$(timeout 120 "$TOP/scripts/ceph-cluster.sh" start "$CEPH_DIR" --osds 1 --port "$RBD_PORT" --ports 16 \
  --osd-bytes $((256 << 20))) || fail "ceph cluster did not start"
export CEPH_CONF=$CONF
t ceph osd set-nearfull-ratio 0.15 >/dev/null 2>&1
t ceph osd set-backfillfull-ratio 0.17 >/dev/null 2>&1
t ceph osd set-full-ratio 0.19 >/dev/null 2>&1 || fail "set-full-ratio"
# (no pipe into grep -q: its early exit is a SIGPIPE that pipefail reports)
pool_full() {
  local d
  d=$(t ceph osd dump 2>/dev/null) || return 2
  grep -q "^pool .* 'rbd' .*flags [^ ]*full" <<<"$d"
}

R=rbd:rbd/e1
t "$PLOOP" init -s 256M "$R" >/dev/null
SOCK=$TMP/e1.sock
"$PLOOP_NBD" -U "$SOCK" "$R" 2>"$TMP/nbd.err" &
npid=$!
cleanup "kill $npid 2>/dev/null; sleep 0.5"
for _ in $(seq 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || fail "ploop-nbd did not start: $(cat "$TMP/nbd.err")"
URI="nbd+unix:///?socket=$SOCK"

# 200 writes of one new 1 MiB cluster each, pattern i%250+1, 20 ms apart
# (the OSD reports its fill about every second). qemu-io runs them all and
# prints one line per write: "wrote ..." or "write failed: ...".
args=()
for i in $(seq 0 199); do args+=(-c "write -P $((i % 250 + 1)) ${i}M 1M" -c "sleep 20"); done
t qemu-io -f raw "${args[@]}" "$URI" >"$TMP/q.out" 2>&1 || true # fails when a write did
kill -0 $npid 2>/dev/null || fail "ploop-nbd died on a full pool: $(tail -3 "$TMP/nbd.err")"
grep -E '^(wrote|write failed)' "$TMP/q.out" >"$TMP/results"
[[ $(wc -l <"$TMP/results") -eq 200 ]] || fail "expected 200 write results: $(grep -v '^wrote\|^[0-9]' "$TMP/q.out" | head -3)"
acked=$(grep -c '^wrote' "$TMP/results")
nospc=$(grep -c '^write failed: No space left on device' "$TMP/results")
((acked >= 20)) || fail "only $acked writes before the pool was full"
((nospc >= 1)) || fail "no ENOSPC reply in 200 MiB of writes to a 48 MiB pool"
((acked + nospc == 200)) || fail "errors other than ENOSPC: $(grep '^write failed' "$TMP/results" | grep -v 'No space' | head -2)"
pool_full || fail "the pool is not flagged full after the ENOSPC replies"
# One line per failed request in the server's log, naming ENOSPC.
bad=$(grep -c 'failed' "$TMP/nbd.err")
[[ $bad -eq $nospc ]] || fail "server log: $bad failure lines for $nospc ENOSPC replies"
[[ $(grep -c 'No space left on device' "$TMP/nbd.err") -eq $nospc ]] || fail "server log lines do not name ENOSPC"
echo "acknowledged $acked, ENOSPC $nospc"

# A bulk writer into the full pool: one line and a failure exit.
head -c $((8 << 20)) /dev/urandom >"$TMP/src.raw"
if t "$PLOOP" import "$TMP/src.raw" rbd:rbd/e2 >/dev/null 2>"$TMP/imp.err"; then fail "import into a full pool succeeded"; fi
[[ $(wc -l <"$TMP/imp.err") -eq 1 ]] || fail "import: expected one error line: $(cat "$TMP/imp.err")"
grep -q 'No space left on device' "$TMP/imp.err" || fail "import error does not say ENOSPC: $(cat "$TMP/imp.err")"

# Everything acknowledged reads back, through the same server, on the full pool.
check_args=()
i=0
while read -r line; do
  if [[ $line == wrote* ]]; then
    check_args+=(-c "read -P $((i % 250 + 1)) ${i}M 1M")
  else
    check_args+=(-c "read -P 0 ${i}M 1M") # a refused allocation leaves nothing
  fi
  i=$((i + 1))
done <"$TMP/results"
t qemu-io -f raw "${check_args[@]}" "$URI" >"$TMP/r.out" 2>&1 || true
[[ $(grep -c '^read ' "$TMP/r.out") -eq 200 ]] ||
  fail "read-back differs: $(grep -iv '^read \|^[0-9]' "$TMP/r.out" | head -3)"

# Room again (the full ratio back up): the same server takes new clusters.
t ceph osd set-full-ratio 0.95 >/dev/null 2>&1
t ceph osd set-backfillfull-ratio 0.9 >/dev/null 2>&1
t ceph osd set-nearfull-ratio 0.85 >/dev/null 2>&1
for _ in $(seq 100); do pool_full || break; sleep 0.2; done
pool_full && fail "the pool stays full after the ratio went up"
first=$(grep -n -m1 '^write failed' "$TMP/results" | cut -d: -f1)
first=$((first - 1))
t qemu-io -f raw -c "write -P 251 ${first}M 1M" -c flush "$URI" >"$TMP/w2.out" 2>&1
grep -q '^wrote' "$TMP/w2.out" || fail "no write after space came back: $(cat "$TMP/w2.out")"
kill $npid
for _ in $(seq 100); do kill -0 $npid 2>/dev/null || break; sleep 0.1; done
kill -0 $npid 2>/dev/null && fail "ploop-nbd did not stop"
t "$PLOOP" check "$R" >/dev/null || fail "check after the full pool"
t "$PLOOP" export -o "$TMP/e1.raw" "$R" >/dev/null || fail "export after the full pool"
python3 - "$TMP/e1.raw" "$TMP/results" "$first" <<'PY' || fail "the disk's contents after the full pool"
import sys
data = open(sys.argv[1], "rb").read()
res = open(sys.argv[2]).read().splitlines()
first = int(sys.argv[3])
M = 1 << 20
for i, line in enumerate(res):
    want = 251 if i == first else (i % 250 + 1 if line.startswith("wrote") else 0)
    if data[i * M:(i + 1) * M] != bytes([want]) * M:
        sys.exit(f"cluster {i}: expected {want}")
PY
echo PASS
