#!/usr/bin/env bash
# Bounded memory per NBD client: clients that pipeline 32 MiB reads and never
# read a reply must leave the server's RSS within --max-inflight-bytes per
# connection and --max-total-bytes in all, while nbdcopy keeps being served
# and gets the right data; --idle-timeout drops idle and stuck clients, not
# working ones; a request larger than the per-connection bound is served.
. "$(dirname "$0")/functions.sh"
requires python3
requires nbdcopy
[[ -x $PLOOP && -x $PLOOP_NBD ]] || skip "ploop / ploop-nbd not built"
CLIENT="python3 $TOP/tests/integration/nbd-raw-client.py"
MIB=1048576
PORT=21101 # this branch's range (HELPERS.md)

mkdir -p "$TMP/disk"
$PLOOP init -t none -s 256M "$TMP/disk/root.hds" >/dev/null
head -c 96M /dev/urandom >"$TMP/seed.raw"
truncate -s 256M "$TMP/seed.raw"
export PLOOP_RUN_DIR=$TMP/run

SPID=
start_server() { # ADDR-OPTIONS... ; sets SPID, waits until it answers
  rm -f "$TMP/server.log"
  $PLOOP_NBD "$@" "$TMP/disk" 2>"$TMP/server.log" &
  SPID=$!
  cleanup "kill -9 $SPID 2>/dev/null"
  for _ in $(seq 100); do
    nbdinfo --size "$URI" >/dev/null 2>&1 && return 0
    kill -0 $SPID 2>/dev/null || break
    sleep 0.1
  done
  fail "server did not start: $(cat "$TMP/server.log")"
}
stop_server() {
  kill $SPID
  local rc=0
  wait $SPID || rc=$?
  [[ $rc -eq 0 ]] || fail "server exited $rc on SIGTERM: $(tail -3 "$TMP/server.log")"
}
rss() { awk '/^VmRSS:/ {print int($2 / 1024)}' /proc/$SPID/status; } # MiB
PEAK=0
# sample_while LIMIT_MIB SECONDS PID: samples the server's RSS every
# 0.2 s while PID runs (or for SECONDS if PID is ""), at most SECONDS;
# fails at once past LIMIT.
sample_while() {
  local limit=$1 secs=$2 pid=$3 r i
  for ((i = 0; i < secs * 5; i++)); do
    r=$(rss)
    ((r > PEAK)) && PEAK=$r
    if ((r > limit)); then
      kill -9 "$pid" $SPID 2>/dev/null
      fail "server RSS ${r} MiB is over the bound (${limit} MiB) after $((i / 5)) s"
    fi
    [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null && return 0
    sleep 0.2
  done
  [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null || fail "client $pid still running after $secs s"
}

# The image's data, written through a server of its own so the measured
# servers start from their own baseline.
SOCK=$TMP/nbd.sock
URI="nbd+unix:///?socket=$SOCK"
start_server -U "$SOCK"
nbdcopy "$TMP/seed.raw" "$URI"
stop_server

# Bad values are refused with one line.
expect_fail $PLOOP_NBD --max-total-bytes 1M -U "$SOCK" "$TMP/disk" | grep -q "at least 32M"
expect_fail $PLOOP_NBD --max-inflight-bytes lots -U "$SOCK" "$TMP/disk" | grep -q "max-inflight-bytes"
expect_fail $PLOOP_NBD --idle-timeout -1 -U "$SOCK" "$TMP/disk" | grep -q "idle-timeout"

# 1. Default bounds (64M per connection, 512M in all, README): 4 slow
# readers hold at most 4 x 64 MiB; nbdcopy is served beside them.
start_server -U "$SOCK"
BASE=$(rss)
$CLIENT slow "$SOCK" 4 2000 $((32 * MIB)) 120 >"$TMP/slow.out" &
SLOW=$!
cleanup "kill $SLOW 2>/dev/null"
LIMIT=$((BASE + 512 + 48))
sample_while $LIMIT 6 ""
SLOW_RSS=$(rss)
((SLOW_RSS <= BASE + 4 * 64 + 48)) ||
  fail "4 slow readers: RSS ${SLOW_RSS} MiB (baseline ${BASE}), bound 4 x 64 MiB"
((PEAK >= BASE + 96)) || fail "slow readers made the server hold only $((PEAK - BASE)) MiB: test is not stressing it"
grep -q '^sent' "$TMP/slow.out" || fail "slow client did not get its requests out"
nbdcopy "$URI" "$TMP/out.raw" &
COPY=$!
sample_while $LIMIT 90 $COPY
wait $COPY || fail "nbdcopy failed beside the slow readers"
cmp -s "$TMP/seed.raw" "$TMP/out.raw" || fail "nbdcopy read wrong data beside the slow readers"
echo "default bounds: baseline ${BASE} MiB, 4 slow readers ${SLOW_RSS} MiB, peak with nbdcopy ${PEAK} MiB"
kill $SLOW; wait $SLOW 2>/dev/null || true
stop_server

# 2. A tight total (96M) and --idle-timeout 3 over TCP: the stuck readers
# hold no more than the total, are dropped after 3 s without taking reply
# data, and nbdcopy then finishes; an idle client is dropped, a client
# sending a request every second is not.
rm -f "$TMP/out.raw"
URI="nbd://127.0.0.1:$PORT/"
start_server -p $PORT -b 127.0.0.1 --max-total-bytes 96M --idle-timeout 3
BASE=$(rss) PEAK=0
$CLIENT slow 127.0.0.1:$PORT 4 2000 $((32 * MIB)) 60 >"$TMP/slow.out" &
SLOW=$!
cleanup "kill $SLOW 2>/dev/null"
nbdcopy "$URI" "$TMP/out.raw" &
COPY=$!
sample_while $((BASE + 96 + 48)) 60 $COPY
wait $COPY || fail "nbdcopy failed after the stuck readers were dropped"
cmp -s "$TMP/seed.raw" "$TMP/out.raw" || fail "nbdcopy read wrong data"
for _ in $(seq 100); do
  [[ $(grep -c "took no reply data for 3 s" "$TMP/server.log") -ge 4 ]] && break
  sample_while $((BASE + 96 + 48)) 1 ""
done
$CLIENT idle 127.0.0.1:$PORT 15 >"$TMP/idle.out" &
IDLE=$!
$CLIENT busy 127.0.0.1:$PORT 1 8 >"$TMP/busy.out" &
BUSY=$!
wait $IDLE || fail "idle client failed"
wait $BUSY || fail "busy client was not served throughout: $(cat "$TMP/busy.out")"
t=$(cat "$TMP/idle.out")
[[ $t != open ]] || fail "idle client not disconnected within 15 s"
awk -v t="$t" 'BEGIN { exit !(t >= 2.5 && t <= 8) }' || fail "idle client dropped after $t s, expected ~3"
grep -q "^served [6-9]" "$TMP/busy.out" || fail "busy client: $(cat "$TMP/busy.out")"
n=$(grep -c "took no reply data for 3 s" "$TMP/server.log" || true)
[[ $n -eq 4 ]] || fail "expected 4 stuck readers dropped, log says $n: $(cat "$TMP/server.log")"
[[ $(grep -c "sent no request for 3 s" "$TMP/server.log") -eq 1 ]] ||
  fail "expected one idle disconnect: $(cat "$TMP/server.log")"
echo "total 96M, idle 3 s: baseline ${BASE} MiB, peak ${PEAK} MiB; idle client dropped after $t s; $(cat "$TMP/busy.out")"
kill $SLOW 2>/dev/null; wait $SLOW 2>/dev/null || true
stop_server

# 3. One request larger than the per-connection bound still goes through.
URI="nbd+unix:///?socket=$SOCK"
start_server -U "$SOCK" --max-inflight-bytes 1M
$CLIENT read "$SOCK" $((5 * MIB)) $((32 * MIB)) "$TMP/seed.raw" | grep -q "read ok" ||
  fail "a 32 MiB read under --max-inflight-bytes 1M"
rm -f "$TMP/out.raw"
nbdcopy --request-size=$((4 * MIB)) "$URI" "$TMP/out.raw"
cmp -s "$TMP/seed.raw" "$TMP/out.raw" || fail "nbdcopy under --max-inflight-bytes 1M read wrong data"
stop_server
echo PASS
