#!/usr/bin/env bash
# Kill -9 at every fault point of every structural verb. The library names
# each step after which something is durable (libploop/src/fault.c); a
# traced run lists the points a verb passes, then the verb is rerun once per
# point with PLOOP_FAULT_INJECT=N, which SIGKILLs it right there. After each
# kill: every delta checks free of corruption, the disk reads what it read
# before the verb (or, where the verb changes what it reads, what it reads
# after), `ploop check -F -d` leaves it clean, the verb run again succeeds, and
# qemu-img accepts every delta.
source "$(dirname "$0")/functions.sh"
requires python3
requires qemu-img
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
TOOL="python3 $(dirname "$0")/ploop-image-tool.py"
export PLOOP_NO_PROGRESS=1
SIZE=$((4 << 20)) # small: every kill starts from a fresh copy

# The template: base (m0) <- snapshot 1's delta (m1) <- top (m2), 32 KiB
# clusters so that growing to 512 MiB must relocate data out of the BAT's way.
T=$TMP/template
$TOOL mkraw "$TMP/m0.raw" $SIZE 21 3
$PLOOP import -b 64 "$TMP/m0.raw" "$T" >/dev/null
u1=$($PLOOP snapshot "$T")
cp "$TMP/m0.raw" "$TMP/m1.raw"
$TOOL scribble "$TMP/m1.raw" 22 8
$PLOOP import "$TMP/m1.raw" "$T" >/dev/null
u2=$($PLOOP snapshot "$T")
cp "$TMP/m1.raw" "$TMP/m2.raw"
$TOOL scribble "$TMP/m2.raw" 23 8
$PLOOP import "$TMP/m2.raw" "$T" >/dev/null
cmp -s "$TMP/m0.raw" "$TMP/m2.raw" && fail "template: the scribbles changed nothing"

D=$TMP/disk
# Exports go to tmpfs when there is one: the comparison needs no fsync of them.
X=$TMP/x.raw
if [[ -d /dev/shm && -w /dev/shm ]]; then
  X=$(mktemp /dev/shm/ploop-crash-faults.XXXXXX)
  cleanup "rm -f '$X'"
fi
fresh() { rm -rf "$D" && cp -a --sparse=always "$T" "$D"; }
deltas() { sed -n 's:.*<File>\(.*\)</File>.*:\1:p' "$D/DiskDescriptor.xml"; }

# reads_as WHAT MODEL...: the disk's current contents equal one of the
# models over the models' length; anything past it (a grown disk) is zeros.
reads_as() {
  local what=$1 m
  shift
  $PLOOP export -f -o "$X" "$D" >/dev/null 2>"$TMP/export.err" ||
    fail "$what: export failed: $(cat "$TMP/export.err")"
  for m in "$@"; do
    if cmp -s -n "$(stat -c %s "$m")" "$X" "$m"; then
      local extra=$(($(stat -c %s "$X") - $(stat -c %s "$m")))
      ((extra <= 0)) || cmp -s -n $extra -i "$(stat -c %s "$m"):0" "$X" /dev/zero ||
        fail "$what: bytes past the old end are not zeros"
      return 0
    fi
  done
  fail "$what: the disk reads as none of: $*"
}

# check_deltas WHAT: no delta is corrupt (an interrupted conversion is
# flagged, with its backup beside it: that is expected, not corruption).
check_deltas() {
  local f out
  for f in $(deltas); do
    [[ -e $D/$f ]] || fail "$1: the descriptor names $f, which does not exist"
    if ! check_ro "$D/$f"; then
      [[ -e $D/$f.convert-backup && $out == *"conversion was interrupted"* ]] ||
        fail "$1: $f is corrupt: $out"
    fi
  done
}

qemu_check() {
  local f rc
  for f in $(deltas); do
    rc=0
    qemu-img check -f parallels "$D/$f" >"$TMP/q.out" 2>&1 || rc=$?
    # 3 = leaked clusters: lost space after a kill, not corruption.
    [[ $rc -eq 0 || $rc -eq 3 ]] || fail "$1: qemu-img check $f exited $rc: $(cat "$TMP/q.out")"
  done
}

# fault_sweep NAME "VERB ARGS" MODEL_BEFORE [MODEL_AFTER]
total=0
fault_sweep() {
  local name=$1 verb=$2 before=$3 after=${4:-$3} n k rc out
  fresh
  rm -f "$TMP/trace"
  # shellcheck disable=SC2086
  PLOOP_FAULT_TRACE=$TMP/trace $PLOOP $verb "$D" >/dev/null || fail "$name: traced run failed"
  reads_as "$name (no fault)" "$after"
  n=$(wc -l <"$TMP/trace")
  ((n > 0)) || fail "$name: passed no fault point"
  for ((k = 1; k <= n; k++)); do
    local point what
    point=$(sed -n "${k}p" "$TMP/trace" | cut -d' ' -f2)
    what="$name, killed at point $k/$n ($point)"
    fresh
    rc=0
    # shellcheck disable=SC2086
    PLOOP_FAULT_INJECT=$k $PLOOP $verb "$D" >/dev/null 2>"$TMP/verb.err" &
    wait $! 2>/dev/null || rc=$? # (wait's stderr: no "Killed" line from bash)
    [[ $rc -eq 137 ]] || fail "$what: expected the kill (137), got exit $rc: $(cat "$TMP/verb.err")"
    check_deltas "$what"
    out=$($PLOOP check -F -d "$D" 2>&1) || fail "$what: check -F -d: $out"
    out=$($PLOOP check "$D" 2>&1) || fail "$what: not clean after check -F -d: $out"
    reads_as "$what" "$before" "$after"
    # The verb again: it finishes the job (or finds it already done).
    rc=0
    # shellcheck disable=SC2086
    out=$($PLOOP $verb "$D" 2>&1) || rc=$?
    [[ $rc -eq 0 || ($rc -eq 43 && $out == *"no snapshot"*) ||
      ($rc -eq 38 && $out == *"nothing below to merge into"*) ]] || fail "$what: rerun exited $rc: $out"
    reads_as "$what, then rerun" "$after"
    check_deltas "$what, then rerun"
    qemu_check "$what, then rerun"
    total=$((total + 1))
  done
  echo "$name: killed at each of its $n fault points: $(cut -d' ' -f2 "$TMP/trace" | sort | uniq -c | awk '{printf "%s%s x%s", s, $2, $1; s=", "}')"
}

fault_sweep "merge top" "snapshot-merge" "$TMP/m2.raw"
fault_sweep "merge -u" "snapshot-merge -u $u2" "$TMP/m2.raw"
# (merge -A repeats the merge above once per delta: not swept again)
fault_sweep "delete (merge into child)" "snapshot-delete -u $u1" "$TMP/m2.raw"
fault_sweep "snapshot" "snapshot" "$TMP/m2.raw"
fault_sweep "switch" "snapshot-switch -u $u1" "$TMP/m2.raw" "$TMP/m0.raw"
fault_sweep "grow with BAT relocation" "resize -s 512M" "$TMP/m2.raw"
head -c $((2 << 20)) "$TMP/m2.raw" >"$TMP/m2-2M.raw"
fault_sweep "shrink --force" "resize --force -s 2M" "$TMP/m2.raw" "$TMP/m2-2M.raw"
fault_sweep "convert to v1" "convert -v 1" "$TMP/m2.raw"

# Online: the same verbs sent to a ploop-nbd serving the disk, which is the
# process killed. Only the points the verb passes count (not the daemon's
# start).
export PLOOP_RUN_DIR=$TMP/run
SOCK=$TMP/nbd.sock
serve() { # serve ENV...: start ploop-nbd on $D with ENV, wait for its socket
  rm -f "$SOCK"
  env "$@" "$PLOOP_NBD" -U "$SOCK" "$D" 2>"$TMP/server.log" &
  SPID=$!
  disown "$SPID" # its end is checked through the trace, without bash's "Killed" line
  local i
  for i in $(seq 100); do [[ -S $SOCK ]] && return 0; sleep 0.05; done
  fail "ploop-nbd did not start: $(cat "$TMP/server.log")"
}
gone() { # gone PID: wait up to 10 s for it to end
  local i
  for i in $(seq 200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
  return 1
}
online_sweep() {
  local name="online $1" verb=$2 before=$3 after=${4:-$3} start end k rc out
  fresh
  rm -f "$TMP/trace"
  serve PLOOP_FAULT_TRACE="$TMP/trace"
  start=$(wc -l <"$TMP/trace")
  # shellcheck disable=SC2086
  $PLOOP $verb "$D" >/dev/null || fail "$name: traced run failed"
  end=$(wc -l <"$TMP/trace")
  kill "$SPID"
  gone "$SPID" || fail "$name: ploop-nbd did not stop"
  reads_as "$name (no fault)" "$after"
  ((end > start)) || fail "$name: passed no fault point"
  for ((k = start + 1; k <= end; k++)); do
    local what
    what="$name, daemon killed at point $k ($(sed -n "${k}p" "$TMP/trace" | cut -d' ' -f2))"
    fresh
    rm -f "$TMP/trace"
    serve PLOOP_FAULT_INJECT=$k PLOOP_FAULT_TRACE="$TMP/trace"
    # shellcheck disable=SC2086
    $PLOOP $verb "$D" >/dev/null 2>&1 && fail "$what: the verb succeeded though the daemon was killed"
    gone "$SPID" || fail "$what: ploop-nbd still runs"
    [[ $(tail -1 "$TMP/trace" | cut -d' ' -f1) == "$k" ]] ||
      fail "$what: ploop-nbd ended without reaching point $k: $(cat "$TMP/server.log")"
    check_deltas "$what"
    out=$($PLOOP check -F -d "$D" 2>&1) || fail "$what: check -F -d: $out"
    reads_as "$what" "$before" "$after"
    rc=0
    # shellcheck disable=SC2086
    out=$($PLOOP $verb "$D" 2>&1) || rc=$?
    [[ $rc -eq 0 ]] || fail "$what: rerun offline exited $rc: $out"
    reads_as "$what, then rerun" "$after"
    qemu_check "$what, then rerun"
    total=$((total + 1))
  done
  echo "$name: daemon killed at each of the $((end - start)) fault points the verb passes"
}
if [[ -x $PLOOP_NBD ]]; then
  online_sweep "snapshot" "snapshot" "$TMP/m2.raw"
  online_sweep "merge" "snapshot-merge" "$TMP/m2.raw"
  online_sweep "grow" "resize -s 512M" "$TMP/m2.raw"
fi

# A top that rewrote most of its parent: the merge goes up (the parent's few
# unshadowed clusters are copied into the top, which then takes the
# parent's file name).
T=$TMP/template-up
$PLOOP import -b 64 "$TMP/m0.raw" "$T" >/dev/null
$PLOOP snapshot "$T" >/dev/null
cp "$TMP/m0.raw" "$TMP/m3.raw"
python3 -c "import random,sys; f=open(sys.argv[1],'r+b'); f.write(random.Random(31).randbytes(3 << 20))" "$TMP/m3.raw"
$PLOOP import "$TMP/m3.raw" "$T" >/dev/null
fault_sweep "merge up" "snapshot-merge" "$TMP/m3.raw"
[[ $(deltas) == root.hds ]] || fail "merge up: the base image should keep its name root.hds, not $(deltas)"
echo "crash-faults: $total kills at named fault points survived"
