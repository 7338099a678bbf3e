#!/usr/bin/env bash
# Live migration between two network namespaces, the command restarted on
# the destination (--no-criu): every acknowledged record
# arrives, the writer goes on at the destination, nothing stays at the
# source, the destination merges the migration's snapshots away and its
# filesystem checks clean; then --offline; then refusals that change nothing.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"

start_writer web
src exec web -- /bin/sh -c 'dd if=/dev/urandom of=/data bs=1M count=24 2>/dev/null; sync /data'
want=$(md5sum "$SRC/web/rootfs/data" | cut -d' ' -f1)

start_receiver
# the restart path (CRIU's own path: migrate-criu.sh)
migrate web --json --no-criu >"$TMP/out.json" || fail "migrate failed: $(cat "$TMP/out.json")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
cat "$TMP/out.json"
python3 - "$TMP/out.json" <<'PY' || fail "bad --json output"
import json, sys
o = json.load(open(sys.argv[1]))
assert set(o) >= {"rounds", "bytes_sent", "downtime_ms", "total_ms", "criu"}, o
assert len(o["rounds"]) >= 2 and o["rounds"][0] >= 24 << 20, o["rounds"]
assert o["bytes_sent"] >= sum(o["rounds"]), o
assert 0 < o["downtime_ms"] < o["total_ms"], o
assert o["criu"] is False
# where the total went: numbers, one per round in each array
num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
assert num(o["hello_ms"]) and num(o["finish_ms"]), o
for k in ("round_ms", "round_send_ms", "round_receive_ms"):
    assert isinstance(o[k], list) and len(o[k]) == len(o["rounds"]), (k, o[k])
    assert all(num(v) for v in o[k]), (k, o[k])
assert all(r > 0 for r in o["round_ms"]), o["round_ms"]
assert o["hello_ms"] + sum(o["round_ms"]) + o["finish_ms"] <= o["total_ms"] + 1, o
PY
sleep 0.3
kill "$_tail_pid"
acked=$(last_ack)
[[ ! -e $SRC/web ]] || fail "the source kept web: $(ls "$SRC/web")"
[[ $(state_of "$DST" web) == running ]] || fail "web does not run on the destination"
m=$(check_log "$DST/web/rootfs/log") || fail "destination log broken"
((m >= acked)) || fail "record $acked was acknowledged before the freeze, the destination has $m"
sleep 1
m2=$(check_log "$DST/web/rootfs/log") || fail "destination log broken"
((m2 > m)) || fail "the writer does not go on at the destination ($m -> $m2)"
[[ $(md5sum "$DST/web/rootfs/data" | cut -d' ' -f1) == "$want" ]] || fail "data file differs"
for i in $(seq 300); do [[ $(n_images "$DST/web/disk") -eq 1 ]] && break; sleep 0.1; done
[[ $(n_images "$DST/web/disk") -eq 1 ]] || fail "snapshots not merged at the destination: $("$PLOOP" snapshot-list "$DST/web/disk")"
dst stop web --timeout 2
dev=$("$PLOOP" mount "$DST/web/disk")
e2fsck -fn "$dev" >"$TMP/fsck" 2>&1 || { "$PLOOP" umount "$DST/web/disk"; fail "e2fsck: $(cat "$TMP/fsck")"; }
"$PLOOP" umount "$DST/web/disk"
dst destroy web
echo "online: ok ($acked acked, $m2 records at the destination)"

# --offline: stopped here, copied whole, started there.
start_writer off
start_receiver
migrate off --offline >"$TMP/out" 2>&1 || fail "offline migrate failed: $(cat "$TMP/out") / $(cat "$TMP/recv.err")"
grep -q "round 0 (stopped)" "$TMP/out" || fail "no round summary: $(cat "$TMP/out")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
kill "$_tail_pid"
acked=$(last_ack)
[[ ! -e $SRC/off ]] || fail "the source kept off"
[[ $(state_of "$DST" off) == running ]] || fail "off does not run on the destination"
m=$(check_log "$DST/off/rootfs/log") || fail "destination log broken"
((m >= acked)) || fail "offline: record $acked acknowledged, the destination has $m"
echo "offline: ok"

# Refusals: nothing changes on either side.
start_writer web
expect_fail migrate web  # nobody listens
assert_source_intact web 1
expect_fail src migrate nosuch "$ADDR_B:$PORT"
rc=0; src migrate nosuch "$ADDR_B:$PORT" 2>/dev/null || rc=$?
[[ $rc -eq 3 ]] || fail "migrate of a missing container: exit $rc, not 3"
expect_fail src migrate web "$ADDR_B:$PORT" --max-rounds 0
expect_fail src migrate web nocolon
# a name that exists at the destination: refused there, the source runs on
dst create web --size 64M >/dev/null
start_receiver
err=$(expect_fail migrate web)
[[ $err == *exists* ]] || fail "wrong refusal: $err"
wait_receiver >/dev/null
assert_source_intact web 1
[[ -e $DST/web/config ]] || fail "the destination's own web was touched"
echo "refusals: ok"
