# Shared body of tests/integration/crash-*.sh (sourced after functions.sh):
# run crash-writer in MODE, SIGKILL it at a random moment, then require that
# every delta checks free of corruption (lost clusters are fine), that every
# write logged as durable reads back exactly, and that repair leaves the disk
# reading the same.  Usage: crash_loop MODE ITERATIONS
# With POWERFAIL=1 the kill is followed by a simulated power cut
# (tests/crash/powerfail.c): unsynced sectors of the disk's files are lost at
# random, which is what checks the order of data, syncs and BAT writes.
# Knobs to reproduce a failure (each applies to every round): CRASH_ROUNDS
# (instead of ITERATIONS), CRASH_SEED (the writer's seed; its last digit picks
# the power-cut policy), CRASH_MS (kill after this many ms, after the wait
# for the structural operation), CRASH_CUT_AT=N (power-cut tests: the writer
# dies instead of making its Nth change to the disk's files; no timed kill).
WRITER=$BUILD/tests/crash-writer

crash_loop() {
  local mode=$1 iterations=${CRASH_ROUNDS:-$2} size=32M cluster=64K
  # Resize: 32 KiB clusters so growing to 1 GiB needs more BAT clusters.
  [[ $mode == resize ]] && cluster=32K size=16M
  # Plain and snapshot: a BAT past the first 4 KiB page, so entries outside
  # the header's page go through the flush path only (1024 and 2048 entries).
  [[ $mode == plain || $mode == threads ]] && cluster=32K size=32M
  [[ $mode == snapshot ]] && cluster=32K size=64M
  # Mixed: each round runs the next of these modes on the same disk.
  local mixed=(snapshot merge resize convert threads) m=$mode
  [[ $mode == mixed ]] && cluster=32K size=32M
  [[ -x $WRITER ]] || fail "$WRITER not built (make BUILD=... $WRITER)"
  [[ -x $PLOOP ]] || fail "$PLOOP not built"
  local disk=$TMP/disk log=$TMP/log base=$TMP/baseline
  mkdir -p "$disk"
  "$WRITER" init "$disk" "$size" "$cluster"
  truncate -s "$size" "$base"
  local i rc seed ms lost=0 marker_hits=0 out f
  for ((i = 1; i <= iterations; i++)); do
    [[ $mode == mixed ]] && m=${mixed[i % ${#mixed[@]}]}
    seed=${CRASH_SEED:-$((RANDOM * 32768 + RANDOM))}
    ms=$((10 + RANDOM % 291))
    : >"$log" # the writer may be killed before it opens its log
    if [[ ${POWERFAIL:-0} == 1 ]]; then
      ms=$((150 + RANDOM % 750)) # a journaled writer is slower
      PLOOP_POWERFAIL_JOURNAL=$TMP/journal PLOOP_POWERFAIL_DIR=$disk \
        "$WRITER" write "$disk" "$log" "$seed" "$m" 2>"$TMP/writer.err" &
    else
      "$WRITER" write "$disk" "$log" "$seed" "$m" 2>"$TMP/writer.err" &
    fi
    local pid=$!
    if [[ -n ${CRASH_CUT_AT:-} && ${POWERFAIL:-0} == 1 ]]; then
      # The writer kills itself at its Nth change; bounded if it never gets there.
      local tries=0
      while kill -0 "$pid" 2>/dev/null && ((tries++ < 1200)); do sleep 0.05; done
      ms=0
    elif [[ $m == merge || $m == resize || $m == convert ]] && ((i % 2 == 0 || ${POWERFAIL:-0} == 1)); then
      # Aim at the structural operation: wait until it starts, then a short delay.
      local tries=0
      until grep -qE '^(M|R|C) ' "$log" 2>/dev/null ||
        ((tries++ > 600)) || ! kill -0 "$pid" 2>/dev/null; do
        sleep 0.005
      done
      ms=$((RANDOM % 40))
      [[ $m == convert ]] && ms=$((RANDOM % 3)) # a conversion takes a few ms
    fi
    [[ -n ${CRASH_MS:-} ]] && ms=$CRASH_MS
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    kill -KILL "$pid" 2>/dev/null || true
    rc=0
    wait "$pid" 2>/dev/null || rc=$?
    if [[ $rc -eq 77 ]]; then
      skip "crash-$mode: $(tail -1 "$TMP/writer.err")"
    fi
    [[ $rc -eq 137 ]] || fail "round $i (seed $seed): writer exited $rc before the kill: $(cat "$TMP/writer.err")"
    local when=${ms}ms
    [[ -n ${CRASH_CUT_AT:-} && ${POWERFAIL:-0} == 1 ]] && when="cut at change $CRASH_CUT_AT"
    if [[ ${POWERFAIL:-0} == 1 ]]; then
      out=$("$WRITER" powerfail "$TMP/journal" "$seed") || fail "round $i: power-cut replay failed: $out"
      echo "round $i: $out"
    fi
    # Did the kill land inside the operation this mode is about?
    local inside=false
    if [[ $(grep -cE '^(M|R|C) ' "$log") -gt $(grep -cE '^(m|r|c) ' "$log") ]]; then
      marker_hits=$((marker_hits + 1))
      inside=true
    fi

    # 1. No delta in the stack is corrupt; reading only, nothing repaired yet.
    lost=0
    for f in $(sed -n 's:.*<File>\(.*\)</File>.*:\1:p' "$disk/DiskDescriptor.xml"); do
      if ! check_ro "$disk/$f"; then
        # After a power cut mid-conversion the BAT may be torn between units;
        # that state is flagged and kept recoverable by a backup of the BAT,
        # which check -F restores (step 3 then proves nothing was lost).
        [[ $m == convert && $inside == true && -e "$disk/$f.convert-backup" ]] ||
          fail "round $i (seed $seed, $when): ploop check found corruption in $f: $out"
        echo "round $i: $f is mid-conversion with its BAT backup; check -F will restore it"
      fi
      if [[ $out =~ ([0-9]+)\ lost\ clusters ]]; then
        lost=$((lost + BASH_REMATCH[1]))
      fi
    done
    # 2. Every durable write reads back, straight after the crash. (A delta
    # caught mid-conversion is refused until check restores its BAT backup.)
    rc=0
    out=$("$WRITER" verify "$disk" "$log" "$base" 2>&1) || rc=$?
    if [[ $rc -ne 0 ]]; then
      [[ $m == convert && $inside == true && $out == *"conversion was interrupted"* ]] ||
        fail "round $i (seed $seed, $when): data check after crash: $out"
      echo "round $i: killed mid-conversion; the disk is refused until repaired, as it should be"
    fi
    # 3. Repair (clears the in-use mark) and the data is still the same.
    out=$("$PLOOP" check -F -d "$disk" 2>&1) ||
      fail "round $i (seed $seed): ploop check -F -d: $out"
    out=$("$WRITER" verify "$disk" "$log" "$base" --commit 2>&1) ||
      fail "round $i (seed $seed): data check after repair: $out"
    # 4. A second opinion from qemu's parallels driver: leaks (exit 3) are the
    # lost clusters; corruption (exit 2) or a refusal is a failure.
    if command -v qemu-img >/dev/null; then
      local q qrc
      for f in $(sed -n 's:.*<File>\(.*\)</File>.*:\1:p' "$disk/DiskDescriptor.xml"); do
        qrc=0
        q=$(qemu-img check -f parallels "$disk/$f" 2>&1) || qrc=$?
        [[ $qrc -eq 0 || $qrc -eq 3 ]] || fail "round $i: qemu-img check $f exited $qrc: $q"
      done
    fi
    echo "round $i ($m): killed after $when: $out"
  done
  echo "crash-$mode: $iterations kills survived; $lost lost clusters in the stack at the end (reported, not corruption)"
  if [[ $mode == merge || $mode == resize || $mode == convert || $mode == mixed ]]; then
    echo "crash-$mode: $marker_hits kills landed inside a merge, resize or conversion"
  fi
  # The disk ends clean and opens read-write.
  "$PLOOP" check -f --ro "$disk" >/dev/null || fail "disk not clean at the end"
}
