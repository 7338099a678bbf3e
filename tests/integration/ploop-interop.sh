#!/usr/bin/env bash
# Interop with qemu-img both ways: images made by `ploop import` pass
# `qemu-img check` and compare equal to their raw source; images made by
# `qemu-img convert -O parallels` read back byte-identical through `ploop
# export`, as bare deltas and with a restored descriptor.  Also: re-import
# writes only the clusters that changed, and zero clusters take no space.
source "$(dirname "$0")/functions.sh"
requires qemu-img
requires python3
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
TOOL="python3 $(dirname "$0")/ploop-image-tool.py"
export PLOOP_NO_PROGRESS=1

# json_field FILE KEY
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# Number of CLUSTER-sized chunks of FILE that are not all zero.
nonzero_clusters() {
  python3 - "$1" "$2" <<'EOF'
import sys
n = 0
with open(sys.argv[1], "rb") as f:
    while chunk := f.read(int(sys.argv[2])):
        n += any(chunk)
print(n)
EOF
}
# stat_of "import ... N clusters written, M zeroed, K unchanged/skipped" WORD
stat_of() { sed -n "s/.* \([0-9]*\) $2.*/\1/p" <<<"$1"; }

# --- ours -> qemu: import a random raw with zero holes into a new disk
$TOOL mkraw "$TMP/src.raw" $((64 << 20)) 1
out=$($PLOOP import "$TMP/src.raw" "$TMP/disk")
echo "$out"
qemu-img check -f parallels "$TMP/disk/root.hds" || fail "qemu-img check rejects our image"
qemu-img compare -f parallels -F raw "$TMP/disk/root.hds" "$TMP/src.raw" ||
  fail "qemu-img compare: our image differs from its source"
$PLOOP export -o "$TMP/out.raw" "$TMP/disk" >/dev/null
cmp "$TMP/src.raw" "$TMP/out.raw" || fail "export differs from the imported raw"
[[ $(stat -c %s "$TMP/out.raw") -eq $((64 << 20)) ]] || fail "export size"
# Zero clusters stay unallocated: allocated = clusters of the source holding data.
$PLOOP info --json "$TMP/disk" >"$TMP/i.json"
want=$(nonzero_clusters "$TMP/src.raw" $((1 << 20)))
got=$(json_field "$TMP/i.json" allocated_clusters)
[[ $got -eq $want ]] || fail "allocated clusters $got, source has $want non-zero clusters"
$PLOOP check -f "$TMP/disk" >/dev/null || fail "our check rejects our image"
# The export is sparse where the disk has holes.
[[ $(du -k "$TMP/out.raw" | cut -f1) -lt $((64 * 1024)) ]] || fail "export is not sparse"

# Re-importing the same data writes nothing; a few scribbles write a few clusters.
out=$($PLOOP import "$TMP/src.raw" "$TMP/disk")
[[ $(stat_of "$out" "clusters written") -eq 0 ]] || fail "identical re-import wrote clusters: $out"
cp "$TMP/src.raw" "$TMP/src2.raw"
$TOOL scribble "$TMP/src2.raw" 7 5
changed=$(python3 - "$TMP/src.raw" "$TMP/src2.raw" <<'EOF'
import sys
a, b, n = open(sys.argv[1], "rb"), open(sys.argv[2], "rb"), 0
while (x := a.read(1 << 20)):
    n += x != b.read(1 << 20)
print(n)
EOF
)
out=$($PLOOP import "$TMP/src2.raw" "$TMP/disk")
w=$(stat_of "$out" "clusters written")
z=$(stat_of "$out" "zeroed")
[[ $((w + z)) -le $changed && $((w + z)) -gt 0 ]] ||
  fail "re-import touched $w+$z clusters, $changed changed: $out"
qemu-img compare -f parallels -F raw "$TMP/disk/root.hds" "$TMP/src2.raw" || fail "after re-import"

# v1 format and small clusters: qemu-img agrees too.
$PLOOP import -v 1 "$TMP/src.raw" "$TMP/disk-v1" >/dev/null
qemu-img compare -f parallels -F raw "$TMP/disk-v1/root.hds" "$TMP/src.raw" || fail "v1 image"
qemu-img check -f parallels "$TMP/disk-v1/root.hds" >/dev/null || fail "qemu-img check v1"
# (a bounded wait: an import that hangs must fail the test, not stall CI)
timeout 120 $PLOOP import -b 128 "$TMP/src.raw" "$TMP/disk-64k" >/dev/null || fail "import -b 128 failed or hung"
qemu-img compare -f parallels -F raw "$TMP/disk-64k/root.hds" "$TMP/src.raw" || fail "64K clusters"
$TOOL header "$TMP/disk-64k/root.hds" | grep -q '"cluster_sectors": 128,' || fail "-b 128 header"

# A disk bigger than its source: the tail reads as zeros.
$PLOOP import -s 80M "$TMP/src.raw" "$TMP/disk-big" >/dev/null
$PLOOP export -o "$TMP/big.raw" "$TMP/disk-big" >/dev/null
[[ $(stat -c %s "$TMP/big.raw") -eq $((80 << 20)) ]] || fail "bigger disk export size"
cmp -n $((64 << 20)) "$TMP/src.raw" "$TMP/big.raw" || fail "bigger disk head"
cmp -i $((64 << 20)):0 -n $((16 << 20)) "$TMP/big.raw" /dev/zero || fail "bigger disk tail not zero"

# --- qemu -> ours: an image qemu-img made, as a bare delta and as a disk
qemu-img convert -f raw -O parallels "$TMP/src2.raw" "$TMP/q.hds"
$PLOOP check -f --ro "$TMP/q.hds" >/dev/null || fail "our check rejects qemu's image"
$PLOOP info --json "$TMP/q.hds" >"$TMP/qi.json"
[[ $(json_field "$TMP/qi.json" virtual_size) -eq $((64 << 20)) ]] || fail "info of qemu's image"
before=$(sum "$TMP/q.hds")
$PLOOP export -o "$TMP/q.raw" "$TMP/q.hds" >/dev/null
cmp "$TMP/src2.raw" "$TMP/q.raw" || fail "export of qemu's bare delta differs"
[[ $(sum "$TMP/q.hds") == "$before" ]] || fail "export changed qemu's image"

mkdir "$TMP/qdisk"
mv "$TMP/q.hds" "$TMP/qdisk/root.hds"
$PLOOP restore-descriptor "$TMP/qdisk" "$TMP/qdisk/root.hds"
$PLOOP export -f -o "$TMP/q.raw" "$TMP/qdisk" >/dev/null
cmp "$TMP/src2.raw" "$TMP/q.raw" || fail "export of qemu's image as a disk differs"
# Write into qemu's image with our tool; qemu still reads it right.
$PLOOP import "$TMP/src.raw" "$TMP/qdisk" >/dev/null
qemu-img check -f parallels "$TMP/qdisk/root.hds" || fail "qemu-img check after our writes"
qemu-img compare -f parallels -F raw "$TMP/qdisk/root.hds" "$TMP/src.raw" ||
  fail "qemu reads our writes into its image wrong"

# qemu-img made a v2 image with 64 KiB clusters: ours reads it.
qemu-img convert -f raw -O parallels -o cluster_size=64K "$TMP/src.raw" "$TMP/q64.hds"
$PLOOP export -o "$TMP/q64.raw" "$TMP/q64.hds" >/dev/null
cmp "$TMP/src.raw" "$TMP/q64.raw" || fail "export of qemu's 64K-cluster image differs"
echo "ploop-interop: ok"
