#!/usr/bin/env bash
# A stack of 21 snapshots with random writes between them (written by `ploop
# import` of a model raw file kept per snapshot).  Every snapshot exports
# exactly its model (cmp, and qemu-img compare for the chain's base), before
# and after deleting and merging others; snapshot-list, snapshot-switch and
# merge-all are checked against the models too.
source "$(dirname "$0")/functions.sh"
requires python3
requires qemu-img
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
TOOL="python3 $(dirname "$0")/ploop-image-tool.py"
export PLOOP_NO_PROGRESS=1
N=21
SIZE=$((24 << 20))
D=$TMP/disk

# The disk's state is models/cur.raw; snapshot k froze models/k.raw.
mkdir "$TMP/models"
$TOOL mkraw "$TMP/models/cur.raw" $SIZE 11
$PLOOP import -b 256 "$TMP/models/cur.raw" "$D" >/dev/null # 128 KiB clusters: more BAT traffic
declare -a uuid
for ((k = 1; k <= N; k++)); do
  uuid[k]=$($PLOOP snapshot "$D")
  [[ ${uuid[k]} =~ ^\{[0-9a-f-]{36}\}$ ]] || fail "snapshot printed '${uuid[k]}'"
  cp "$TMP/models/cur.raw" "$TMP/models/$k.raw"
  $TOOL scribble "$TMP/models/cur.raw" $((100 + k)) 6
  $PLOOP import "$TMP/models/cur.raw" "$D" >/dev/null
done

# check_all LIST: every snapshot in LIST, and the top, export their model.
check_all() {
  local k
  for k in "$@"; do
    $PLOOP export -f -u "${uuid[k]}" -o "$TMP/x.raw" "$D" >/dev/null
    cmp "$TMP/x.raw" "$TMP/models/$k.raw" || fail "snapshot $k (${uuid[k]}) differs from its model"
  done
  $PLOOP export -f -o "$TMP/x.raw" "$D" >/dev/null
  cmp "$TMP/x.raw" "$TMP/models/cur.raw" || fail "top differs from its model"
}
all=$(seq 1 $N)
check_all $all
# The base delta is a plain image qemu can read: it holds snapshot 1's state.
base=$($PLOOP snapshot-list -H -o uuid,fname "$D" | awk -v u="${uuid[1]}" '$1 == u {print $2}')
[[ -f $base ]] || fail "snapshot-list gives no file for the base"
qemu-img compare -f parallels -F raw "$base" "$TMP/models/1.raw" || fail "qemu reads the base wrong"

# --- snapshot-list: N+1 images, one current (the top, its parent the last snapshot)
list=$($PLOOP snapshot-list "$D")
[[ $(head -1 <<<"$list") =~ ^PARENT_UUID\ +C\ UUID\ +FNAME$ ]] || fail "snapshot-list header: $(head -1 <<<"$list")"
[[ $(tail -n +2 <<<"$list" | wc -l) -eq $((N + 1)) ]] || fail "snapshot-list rows"
[[ $($PLOOP snapshot-list -H -o current "$D" | grep -c '\*') -eq 1 ]] || fail "one current"
cur=$($PLOOP snapshot-list -H -o current,parent_uuid,uuid "$D" | awk '$1 == "*" {print $2, $3}')
[[ $cur == "${uuid[N]} {5fbaabe3-6958-40ff-92a7-860e329aab41}" ]] || fail "current row: $cur"
$PLOOP snapshot-list -H -o parent_uuid -u "${uuid[1]}" "$D" | grep -qx '{00000000-0000-0000-0000-000000000000}' ||
  fail "base's parent is not the null UUID"
$PLOOP snapshot-list --json "$D" | python3 -c '
import json, sys
rows = json.load(sys.stdin)
assert len(rows) == int(sys.argv[1]) + 1, len(rows)
by = {r["uuid"]: r for r in rows}
top = [r for r in rows if r["current"]]
assert len(top) == 1
# Following parents from the top visits every image once and ends at null.
seen, g = 0, top[0]["uuid"]
while g != "{00000000-0000-0000-0000-000000000000}":
    g = by[g]["parent_uuid"]; seen += 1
assert seen == len(rows), seen
' $N || fail "snapshot-list --json"
expect_fail $PLOOP snapshot-list -u "{11111111-2222-3333-4444-555555555555}" "$D" | grep -q 'no snapshot' ||
  fail "snapshot-list of an unknown UUID"

# --- delete some snapshots in the middle (each merges into its child): others unchanged
for k in 3 10 11 17; do
  $PLOOP snapshot-delete -u "${uuid[k]}" "$D"
  $PLOOP snapshot-list -H -o uuid "$D" | grep -qF "${uuid[k]}" && fail "snapshot $k still listed"
done
remaining=$(for k in $all; do case $k in 3 | 10 | 11 | 17) ;; *) echo $k ;; esac; done)
check_all $remaining
expect_fail $PLOOP export -o "$TMP/y.raw" -u "${uuid[3]}" "$D" >/dev/null
expect_fail $PLOOP snapshot-delete -u "${uuid[3]}" "$D" >/dev/null
before=$(sum "$D/DiskDescriptor.xml")
expect_fail $PLOOP snapshot-delete -u "{5fbaabe3-6958-40ff-92a7-860e329aab41}" "$D" >/dev/null
[[ $(sum "$D/DiskDescriptor.xml") == "$before" ]] || fail "refused delete changed the descriptor"

# --- merge snapshot 6 into its parent 5: 5's state is gone, 6 keeps its own
$PLOOP snapshot-merge -u "${uuid[6]}" "$D"
$PLOOP snapshot-list -H -o uuid "$D" | grep -qF "${uuid[5]}" && fail "snapshot 5 still listed after merge"
remaining=$(for k in $remaining; do if [[ $k -ne 5 ]]; then echo $k; fi; done)
check_all $remaining
# Default merge: the top into the snapshot below it (21): 21 is gone, the top unchanged.
$PLOOP snapshot-merge "$D"
$PLOOP snapshot-list -H -o uuid "$D" | grep -qF "${uuid[21]}" && fail "snapshot 21 still listed after merge"
remaining=$(for k in $remaining; do if [[ $k -ne 21 ]]; then echo $k; fi; done)
check_all $remaining
$PLOOP check -f "$D" >/dev/null || fail "check after merges"

# --- snapshot-switch to snapshot 15: the top now equals model 15, the old
# top's changes are dropped (its file removed), every snapshot stays intact
n_before=$($PLOOP snapshot-list -H -o uuid "$D" | wc -l)
old_top=$($PLOOP snapshot-list -H -o current,fname "$D" | awk '$1 == "*" {print $2}')
$PLOOP snapshot-switch -u "${uuid[15]}" "$D"
cp "$TMP/models/15.raw" "$TMP/models/cur.raw"
[[ $($PLOOP snapshot-list -H -o uuid "$D" | wc -l) -eq $n_before ]] || fail "switch changed the image count"
[[ $($PLOOP snapshot-list -H -o current,parent_uuid "$D" | awk '$1 == "*" {print $2}') == "${uuid[15]}" ]] ||
  fail "after switch the top's parent is not snapshot 15"
[[ ! -e $old_top ]] || $PLOOP snapshot-list -H -o fname "$D" | grep -qxF "$old_top" ||
  fail "switch left the dropped top's file $old_top behind"
check_all 1 2 4 15 16 20
# Write after the switch, snapshot again, keep going.
$TOOL scribble "$TMP/models/cur.raw" 999 4
$PLOOP import "$TMP/models/cur.raw" "$D" >/dev/null
uuid[100]=$($PLOOP snapshot "$D")
cp "$TMP/models/cur.raw" "$TMP/models/100.raw"
check_all 1 15 16 20 100

# Snapshot 15 now has two children (16 and 100): merging everything is refused
# and changes nothing, until the old branch 16..20 is deleted (leaves first).
# Every file of the disk but its lock file (which names the last holder's pid).
disk_sum() { (cd "$D" && find . -type f ! -name '*.lck' -print0 | sort -z | xargs -0 sha256sum) | sha256sum; }
before=$(disk_sum)
expect_fail $PLOOP snapshot-merge -A "$D" | grep -q children || fail "merge -A over a branch"
[[ $(disk_sum) == "$before" ]] || fail "refused merge -A changed files"
for k in 20 19 18 16; do
  $PLOOP snapshot-delete -u "${uuid[k]}" "$D"
done
check_all 1 15 100

# --- merge everything into the base: one image left, holding the top's data
$PLOOP snapshot-merge -A "$D"
[[ $($PLOOP snapshot-list -H -o uuid "$D" | wc -l) -eq 1 ]] || fail "merge -A left several images"
$PLOOP export -f -o "$TMP/x.raw" "$D" >/dev/null
cmp "$TMP/x.raw" "$TMP/models/cur.raw" || fail "after merge -A the disk differs"
only=$($PLOOP snapshot-list -H -o fname "$D")
qemu-img check -f parallels "$only" >/dev/null || fail "qemu-img check after merge -A"
qemu-img compare -f parallels -F raw "$only" "$TMP/models/cur.raw" || fail "qemu compare after merge -A"
# Every delta file that is no longer listed was removed.
[[ $(ls "$D" | grep -vc DiskDescriptor) -eq 1 ]] || fail "stale delta files: $(ls "$D")"
echo "ploop-snapshots: ok"
