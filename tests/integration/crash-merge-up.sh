#!/usr/bin/env bash
# Crash safety of merging up (the top rewrote most of its base, so the base's
# few unshadowed clusters are copied into the top, which then takes the
# base's file name): SIGKILL `ploop snapshot-merge -A` at random moments; every
# delta must check free of corruption and the disk must read the top's data
# before and after repair.
source "$(dirname "$0")/functions.sh"
requires python3
export PLOOP_NO_PROGRESS=1
MIB=48
python3 - "$TMP" "$MIB" <<'PY'
import random, sys
d, mib = sys.argv[1], int(sys.argv[2])
rnd = random.Random(7)
a = bytearray(rnd.randbytes(mib << 20))
b = bytearray(a)
for i in range(mib):
    if i % 6 != 5:  # the top rewrites 5 MiB in every 6
        b[i << 20:(i + 1) << 20] = rnd.randbytes(1 << 20)
open(d + "/a.raw", "wb").write(a)
open(d + "/b.raw", "wb").write(b)
PY
tmpl=$TMP/tmpl
"$PLOOP" import "$TMP/a.raw" "$tmpl" >/dev/null
"$PLOOP" snapshot "$tmpl" >/dev/null
"$PLOOP" import "$TMP/b.raw" "$tmpl" >/dev/null
base_file=$(sed -n 's:.*<File>\(.*\)</File>.*:\1:p' "$tmpl/DiskDescriptor.xml" | grep -vF '{')
[[ $base_file == root.hds ]] || fail "unexpected base file name '$base_file'"

# One full merge: it must go up (the top's inode survives under the base's
# name) and leave only that file.
d=$TMP/d
cp -a "$tmpl" "$d"
top_ino=$(stat -c %i "$d"/root.hds.*)
t0=$(date +%s%N)
"$PLOOP" snapshot-merge -A "$d" >/dev/null || fail "merge failed"
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $(stat -c %i "$d/root.hds") == "$top_ino" ]] || fail "the merge did not go up (base file is not the top's)"
[[ $(find "$d" -type f -name 'root.hds*' | wc -l) -eq 1 ]] || fail "files left: $(ls "$d")"
"$PLOOP" export -o "$TMP/out.raw" "$d" >/dev/null
cmp -s "$TMP/out.raw" "$TMP/b.raw" || fail "merged disk differs from the top's data"
echo "uninterrupted merge: ${ms} ms"

mid=0
for ((i = 1; i <= 12; i++)); do
  rm -rf "$d"
  cp -a "$tmpl" "$d"
  sync
  delay=$((RANDOM % (ms + 20)))
  "$PLOOP" snapshot-merge -A "$d" >/dev/null 2>"$TMP/merge.err" &
  pid=$!
  sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  files=$(sed -n 's:.*<File>\(.*\)</File>.*:\1:p' "$d/DiskDescriptor.xml")
  [[ $(echo "$files" | wc -l) -eq 2 ]] && mid=$((mid + 1))
  for f in $files; do
    [[ -f $d/$f ]] || fail "round $i (${delay} ms): the descriptor names $f, which does not exist"
    check_ro "$d/$f" || fail "round $i (${delay} ms): $f: $out"
  done
  "$PLOOP" check -F -d "$d" >/dev/null 2>&1 || fail "round $i (${delay} ms): repair failed"
  rm -f "$TMP/out.raw"
  "$PLOOP" export -o "$TMP/out.raw" "$d" >/dev/null || fail "round $i (${delay} ms): export failed"
  cmp -s "$TMP/out.raw" "$TMP/b.raw" || fail "round $i (${delay} ms): data differs after the crash"
  # The interrupted merge can be finished, and ends with one file.
  "$PLOOP" snapshot-merge -A "$d" >/dev/null 2>&1 || true
  rm -f "$TMP/out.raw"
  "$PLOOP" export -o "$TMP/out.raw" "$d" >/dev/null || fail "round $i: export after the second merge failed"
  cmp -s "$TMP/out.raw" "$TMP/b.raw" || fail "round $i: data differs after finishing the merge"
  echo "round $i: killed after ${delay} ms, $(echo "$files" | wc -l) image(s) in the descriptor: ok"
done
echo "crash-merge-up: 12 kills survived, $mid inside the merge (before its descriptor switch)"
