#!/usr/bin/env bash
# A bounded soak (`make soak`; SOAK_SECONDS, default 600). For SOAK_SECONDS,
# all at once:
#   - ploop-nbd serves disk A on 127.0.0.1 (a port of 21800-21899); 8 NBD
#     clients (nbd-load.py) do mixed, verified I/O, each on a region of its own
#     (regions end mid-cluster, so neighbours share clusters);
#   - every 1-3 s an online snapshot or merge of A through the control socket
#     (`ploop snapshot`, `ploop snapshot-merge [-u UUID | -A]`), depth <= 3;
#   - a container on its own ploop disk: `run -- /bin/true`, and every 4th
#     time `start` + `stop`;
#   - disk B mounted (`ploop mount`, FUSE + loop + ext4) with a file writer
#     (fs-writer.py) writing, fsyncing and reading back files.
# Every loop stops by itself at the deadline or after a bounded count.
# Pass: no client, the writer or a loop reported an error; each client read
# its whole region back; A's final image (`ploop export`, server stopped)
# equals the clients' models; `ploop check` clean for A and B; B's files
# verify after a remount; no container mount, loop device or daemon left;
# and the daemons do not grow (the rule is in soak-stats.py: after warm-up,
# the last quarter's median RSS is within 10% + 8 MiB of the first
# quarter's; fd counts at idle are equal at start and end).
# Exit 0 pass, 77 skip (not root, no FUSE, no busybox), 1 fail.
source "$(dirname "$0")/../integration/functions.sh"
source "$TOP/tests/integration/container-lib.bash"
# Python straight, not through a version manager's shim: under load a shim
# costs seconds per start, and the parts must start together.
PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3) || skip "python3 not installed"
requires fio
[[ -c /dev/fuse ]] || skip "no /dev/fuse"
requires mkfs.ext4
[[ -x $PLOOP && -x $PLOOP_NBD ]] || skip "ploop / ploop-nbd not built in $BUILD"
HERE=$TOP/tests/soak
SECS=${SOAK_SECONDS:-600}
[[ $SECS =~ ^[0-9]+$ && $SECS -ge 10 ]] || fail "SOAK_SECONDS: expected a number >= 10, got '$SECS'"
NCLIENTS=8
REGION=$((12 * 1048576 + 524288)) # 12.5 MiB: regions end mid-cluster
MAX_LOOPS=100000                  # a bound on every loop besides the clock
GRACE=$((SECS + 180))             # no part may outlive this
export PLOOP_NO_PROGRESS=1 PLOOP_RUN_DIR=$TMP/run
# Sanitized builds: keep ASan's quarantine of freed memory small and global
# (little per thread), so that the RSS rule sees the program's memory and not
# the allocator's cache.
# Reports of every process (daemons too: their stderr may go nowhere) land in
# $TMP/san and fail the soak.
mkdir -p "$TMP/san"
export ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=8:thread_local_quarantine_size_kb=64:log_path=$TMP/san/asan
# The two daemons are also checked for leaks when they exit.
LEAKS=${ASAN_OPTIONS/detect_leaks=0/detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}:log_path=$TMP/san/ubsan
A=$TMP/a B=$TMP/b M=$TMP/mnt
# SOAK_KEEP=DIR keeps the samples and every part's output there.
[[ -n ${SOAK_KEEP:-} ]] && cleanup "mkdir -p '$SOAK_KEEP' && cp -r '$TMP/out' '$TMP/samples' '$TMP/server.log' '$TMP/san' '$SOAK_KEEP/' 2>/dev/null"
mkdir -p "$A" "$B" "$M" "$TMP/out"
log() { printf '[soak %4ds] %s\n' $(($(date +%s) - ${T0:-$(date +%s)})) "$*"; }
note_fail() { echo "$*" >>"$TMP/failures"; }

# ---- setup, before the clock starts --------------------------------------
SETUP0=$(date +%s)
$PLOOP init -t none -s $((NCLIENTS * REGION / 1048576 + 4))M "$A/root.hds" >/dev/null
port=
for p in $(seq 21800 21819); do
  ASAN_OPTIONS=$LEAKS $PLOOP_NBD -p "$p" -b 127.0.0.1 "$A" 2>"$TMP/server.log" &
  SPID=$!
  for _ in $(seq 50); do
    ss -Hltn "sport = :$p" | grep -q . && break
    kill -0 $SPID 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $SPID 2>/dev/null && ss -Hltnp "sport = :$p" | grep -q "pid=$SPID,"; then
    port=$p
    break
  fi
  kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
done
[[ -n $port ]] || fail "no free port in 21800-21819 for ploop-nbd: $(cat "$TMP/server.log")"
cleanup "kill $SPID 2>/dev/null; wait $SPID 2>/dev/null"

$PLOOP init -t none -s 256M -t ext4 "$B/root.hds" >/dev/null
ASAN_OPTIONS=$LEAKS $PLOOP mount -m "$M" "$B" >/dev/null
cleanup "$PLOOP umount '$B' >/dev/null 2>&1"
MPID=$($PLOOP list --json | "$PY" -c 'import json,sys; print([a["pid"] for a in json.load(sys.stdin) if a["disk"] == sys.argv[1]][0])' "$B")
kill -0 "$MPID" || fail "no daemon for the mount"

# The mount daemon's FUSE ring (32 entries of 1 MiB per CPU) is touched as
# requests come, and only a deep queue of large ones touches it all: do that
# now, so that its filling is not mistaken for growth.
fio --name=warm --filename="$M/warm" --size=128M --bs=1M --rw=randrw --direct=1 --ioengine=libaio \
  --iodepth=64 --numjobs=2 --time_based --runtime=3 >/dev/null || fail "fio warm-up on the mount"
rm -f "$M/warm"

ct create c1 --size 128M >/dev/null
loops_before=$(losetup -a | grep -c "$CTROOT/" || true)

fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
FD0_SERVER=$(fds "$SPID") FD0_MOUNT=$(fds "$MPID")

# ---- the load -------------------------------------------------------------
cat "/proc/$SPID/smaps" >"$TMP/out/smaps.server.start" 2>/dev/null
cat "/proc/$MPID/smaps" >"$TMP/out/smaps.mount.start" 2>/dev/null
log "setup took $(($(date +%s) - SETUP0)) s"
T0=$(date +%s)
END=$((T0 + SECS))
log "start: $SECS s, ploop-nbd pid $SPID on 127.0.0.1:$port, mount daemon pid $MPID, build $BUILD"

# Sampler: RSS (KiB) and fd count of both daemons, once a second.
"$PY" "$HERE/soak-stats.py" sample "$TMP/samples" "$T0" "$TMP/stop-sampler" "$TMP/ctl-busy" $GRACE "$SPID" "$MPID" &
SAMPLER=$!
# On an early exit, the parts still running go first (cleanups run last-in
# first-out): the timeout wrappers pass the signal on to their command.
pids=() names=()
cleanup 'kill "${pids[@]}" $SAMPLER 2>/dev/null; wait "${pids[@]}" $SAMPLER 2>/dev/null'

for ((k = 0; k < NCLIENTS; k++)); do
  timeout -k 5 $GRACE "$PY" "$HERE/nbd-load.py" "127.0.0.1:$port" $k $((k * REGION)) $REGION "$SECS" 10000000 \
    "$TMP/out/model.$k" >"$TMP/out/client.$k" 2>&1 &
  pids+=($!) names+=("client $k")
done

# Online snapshots and merges of A.
(
  set +e
  snaps=0 merges=0 n=0
  RANDOM=7
  while (($(date +%s) < END && n < MAX_LOOPS)); do
    n=$((n + 1))
    (($(date +%s) + 2 < END)) || break
    sleep "$((1 + RANDOM % 2)).$((RANDOM % 10))"
    mapfile -t uuids < <($PLOOP snapshot-list -H -o uuid "$A")
    # A cycle of six: snapshot, merge the top down, two snapshots, merge the
    # oldest snapshot above the base into it (-u), merge everything (-A).
    case $((n % 6)):${#uuids[@]} in
    1:* | 3:* | 4:*) args=() op=snapshot ;;
    2:*) args=() op=snapshot-merge ;;
    5:1 | 0:1) args=() op=snapshot ;;
    5:*) args=(-u "${uuids[1]}") op=snapshot-merge ;;
    0:*) args=(-A) op=snapshot-merge ;;
    esac
    t=$(date +%s%N)
    touch "$TMP/ctl-busy"
    out=$($PLOOP "$op" "${args[@]}" "$A" 2>&1) || { rm -f "$TMP/ctl-busy"; note_fail "$op ${args[*]} (depth ${#uuids[@]}): $out"; continue; }
    rm -f "$TMP/ctl-busy"
    echo "$op $((($(date +%s%N) - t) / 1000000))" >>"$TMP/out/snapshot-ms"
    if [[ $op == snapshot ]]; then snaps=$((snaps + 1)); else merges=$((merges + 1)); fi
  done
  echo "$snaps $merges" >"$TMP/out/snapshots"
) &
pids+=($!) names+=("snapshot loop")

# The container: run /bin/true; every 4th round start + stop instead.
(
  set +e
  runs=0 starts=0 n=0
  while (($(date +%s) < END && n < MAX_LOOPS)); do
    n=$((n + 1))
    (($(date +%s) + 3 < END)) || break # a round takes 1-3 s
    if ((n % 4)); then
      out=$(timeout 120 "$PLOOP_CONTAINER" --root "$CTROOT" run c1 -- /bin/true 2>&1) ||
        { note_fail "container run $n: $out"; break; }
      runs=$((runs + 1))
    else
      out=$(timeout 120 "$PLOOP_CONTAINER" --root "$CTROOT" start c1 -- /bin/sleep 300 2>&1) ||
        { note_fail "container start $n: $out"; break; }
      out=$(timeout 120 "$PLOOP_CONTAINER" --root "$CTROOT" stop --timeout 2 c1 2>&1) ||
        { note_fail "container stop $n: $out"; break; }
      starts=$((starts + 1))
    fi
  done
  echo "$runs $starts" >"$TMP/out/container"
) &
pids+=($!) names+=("container loop")

timeout -k 5 $GRACE "$PY" "$HERE/fs-writer.py" write "$M" "$SECS" $MAX_LOOPS "$TMP/out/fs.state" \
  >"$TMP/out/fs" 2>&1 &
pids+=($!) names+=("file writer")

for i in "${!pids[@]}"; do
  wait "${pids[i]}" || note_fail "${names[i]} exited $?"
  [[ $(date +%s) -le $((END + 1)) ]] || log "${names[i]} done"
done
pids=() # all reaped: nothing for the early-exit cleanup to kill
log "load done"
for ((c = 0; c < NCLIENTS; c++)); do
  grep -q '^{' "$TMP/out/client.$c" || note_fail "client $c: $(tail -1 "$TMP/out/client.$c")"
done
grep -q '^{' "$TMP/out/fs" || note_fail "file writer: $(tail -1 "$TMP/out/fs")"

# Back to one delta, clients gone: the idle fd count of the server.
touch "$TMP/ctl-busy"
$PLOOP snapshot-merge -A "$A" >/dev/null 2>&1 || true
rm -f "$TMP/ctl-busy"
[[ $($PLOOP snapshot-list -H -o uuid "$A" | wc -l) -eq 1 ]] || note_fail "A still has snapshots after merge -A"
for _ in $(seq 50); do [[ $(fds $SPID) -le $FD0_SERVER ]] && break; sleep 0.1; done
FD1_SERVER=$(fds $SPID) FD1_MOUNT=$(fds "$MPID")
cat "/proc/$SPID/smaps" >"$TMP/out/smaps.server.end" 2>/dev/null
cat "/proc/$MPID/smaps" >"$TMP/out/smaps.mount.end" 2>/dev/null
sleep 1.2 # one more sample at idle
touch "$TMP/stop-sampler"
wait $SAMPLER
SAMPLER=

# ---- the checks -----------------------------------------------------------
kill $SPID
wait $SPID || note_fail "ploop-nbd exit status $? ($(tail -3 "$TMP/server.log"))"
$PLOOP check "$A" >/dev/null 2>&1 || note_fail "ploop check A: $($PLOOP check "$A" 2>&1 | tail -3)"
$PLOOP export -o "$TMP/a.raw" "$A" >/dev/null || note_fail "export A"
models=()
for ((c = 0; c < NCLIENTS; c++)); do models+=("$TMP/out/model.$c"); done
if compared=$("$PY" "$HERE/nbd-load.py" compare "$TMP/a.raw" $REGION "${models[@]}" 2>&1); then
  log "A's image equals the clients' models ($((compared >> 20)) MiB compared)"
else
  note_fail "A's image: $compared"
fi
rm -f "$TMP/a.raw"

$PLOOP umount "$B" >/dev/null || note_fail "umount B"
$PLOOP check "$B" >/dev/null 2>&1 || note_fail "ploop check B: $($PLOOP check "$B" 2>&1 | tail -3)"
if [[ -s $TMP/out/fs.state ]]; then
  $PLOOP mount -r -m "$M" "$B" >/dev/null || note_fail "remount B"
  if fsbytes=$("$PY" "$HERE/fs-writer.py" verify "$M" "$TMP/out/fs.state" 2>&1); then
    log "B's files verify after a remount ($((fsbytes >> 20)) MiB)"
  else
    note_fail "B after remount: $fsbytes"
  fi
  $PLOOP umount "$B" >/dev/null || note_fail "umount B after the remount"
fi

ct list | awk '$1 == "c1" && $2 != "stopped" {exit 1}' || note_fail "container c1 not stopped: $(ct list)"
[[ $(losetup -a | grep -c "$CTROOT/" || true) -eq $loops_before ]] || note_fail "loop devices left: $(losetup -a | grep "$CTROOT/")"
grep -q "$CTROOT/" /proc/mounts && note_fail "container mounts left: $(grep "$CTROOT/" /proc/mounts)"
pgrep -f "ploop-nbd.*$CTROOT/" >/dev/null && note_fail "container disk daemon left"

"$PY" "$HERE/soak-stats.py" "$TMP/samples" "$TMP/out" $NCLIENTS "$SECS" \
  "$FD0_SERVER" "$FD1_SERVER" "$FD0_MOUNT" "$FD1_MOUNT" || note_fail "daemon resources not flat (see above)"

for f in "$TMP"/san/*; do
  [[ -e $f ]] || continue
  note_fail "sanitizer report $(basename "$f"): $(grep -m1 -E 'ERROR|runtime error' "$f")"
  sed 's/^/    /' "$f" | head -40 >&2
done

if [[ -s $TMP/failures ]]; then
  echo "SOAK FAILED:" >&2
  sed 's/^/  /' "$TMP/failures" >&2
  exit 1
fi
log "PASS"
