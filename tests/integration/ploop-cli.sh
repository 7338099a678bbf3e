#!/usr/bin/env bash
# The ploop command line itself: help, version, usage errors (one line, exit 38, SYSEXIT_PARAM),
# init + info (text and JSON, checked by python3 and qemu-img info), check of a
# fresh disk, restore-descriptor.
source "$(dirname "$0")/functions.sh"
requires qemu-img
requires python3
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"

# exit_code CODE CMD...: CMD fails with exactly CODE and a one-line error.
exit_code() {
  local want=$1 rc=0
  shift
  expect_fail "$@" >/dev/null
  "$@" >/dev/null 2>&1 || rc=$?
  [[ $rc -eq $want ]] || fail "'$*' exited $rc, expected $want"
}

# --- help and version
$PLOOP --version | grep -qx "ploop [0-9.]*" || fail "--version"
$PLOOP --help | grep -q '^  snapshot-merge ' || fail "--help lacks the verb list"
$PLOOP --help | grep -q '^  11   image or descriptor is corrupt' || fail "--help lacks exit codes"
$PLOOP help init | grep -q '^usage: ploop init -s SIZE' || fail "help init"
$PLOOP init --help | grep -q -- '--blocksize' || fail "init --help"
for v in info check import export snapshot snapshot-list snapshot-delete snapshot-merge \
  snapshot-switch resize convert restore-descriptor mount umount list compact balloon; do
  $PLOOP "$v" --help | grep -q "^usage: ploop $v" || fail "$v --help"
done

# --- usage errors: one line on stderr, exit 38, naming the problem
exit_code 38 $PLOOP
exit_code 38 $PLOOP frobnicate
expect_fail $PLOOP frobnicate | grep -q "unknown verb 'frobnicate'" || fail "unknown verb message"
exit_code 38 $PLOOP init --bogus "$TMP/x/root.hds"
expect_fail $PLOOP init -Z "$TMP/x/root.hds" | grep -q "unknown option '-Z'" || fail "bad option msg"
expect_fail $PLOOP init -s | grep -q "option '-s' needs a value" || fail "missing value msg"
exit_code 38 $PLOOP init "$TMP/x.hds"
expect_fail $PLOOP init "$TMP/x.hds" | grep -q -- "-s SIZE is required" || fail "no -s msg"
expect_fail $PLOOP init -s 0 "$TMP/x.hds" | grep -q "greater than zero" || fail "-s 0 msg"
expect_fail $PLOOP init -s 10Q "$TMP/x.hds" | grep -q "invalid size '10Q'" || fail "-s 10Q msg"
expect_fail $PLOOP init -s 1G -b 7 "$TMP/x.hds" | grep -q -- "-b: invalid value '7'" || fail "-b 7"
expect_fail $PLOOP init -s 1G -b 100 "$TMP/x.hds" | grep -q "not a power of two" || fail "-b 100"
exit_code 38 $PLOOP init -s 1G -v 3 "$TMP/x.hds"
exit_code 38 $PLOOP init -s 1G -t btrfs "$TMP/x.hds"
exit_code 38 $PLOOP init -s 1G "$TMP/x.hds" extra
exit_code 38 $PLOOP snapshot-delete "$TMP"
exit_code 38 $PLOOP snapshot-delete -u not-a-uuid "$TMP"
exit_code 38 $PLOOP snapshot-merge -A -u 5fbaabe3-6958-40ff-92a7-860e329aab41 "$TMP"
exit_code 38 $PLOOP convert "$TMP"
exit_code 38 $PLOOP convert -v 1 -f raw "$TMP"
exit_code 38 $PLOOP export "$TMP"
exit_code 38 $PLOOP check -R "$TMP"
exit_code 38 $PLOOP snapshot-list -o uuid,colour "$TMP"
exit_code 38 $PLOOP mount -t ext4 "$TMP"
exit_code 38 $PLOOP umount -d /dev/loop0 -m /mnt
exit_code 38 $PLOOP balloon inflate "$TMP"
exit_code 38 $PLOOP list extra
# Absurd sizes come back from the library as bad parameters, before any file is made.
exit_code 38 $PLOOP init -s 999999T "$TMP/huge.hds"
[[ ! -e $TMP/huge.hds && ! -e $TMP/DiskDescriptor.xml ]] || fail "-s 999999T left files behind"
exit_code 4 $PLOOP info "$TMP/nonexistent"
[[ -z $(ls "$TMP") ]] || fail "usage errors left files: $(ls "$TMP")"

# --- init + info
mkdir "$TMP/d"
$PLOOP init -t none -s 100M "$TMP/d/root.hds"
[[ -f $TMP/d/root.hds && -f $TMP/d/DiskDescriptor.xml ]] || fail "init made no files"
expect_fail $PLOOP init -t none -s 100M "$TMP/d/root.hds" >/dev/null # exists
qemu-img info -f parallels --output=json "$TMP/d/root.hds" >"$TMP/qi.json"
python3 - "$TMP/qi.json" <<'EOF' || fail "qemu-img info disagrees"
import json, sys
q = json.load(open(sys.argv[1]))
assert q["virtual-size"] == 100 << 20, q
EOF
python3 "$(dirname "$0")/ploop-image-tool.py" header "$TMP/d/root.hds" | grep -q '"cluster_sectors": 2048,' ||
  fail "default cluster is not 2048 sectors"
$PLOOP info "$TMP/d" | grep -q '^virtual size: *100.0 MiB (104857600 bytes)' || fail "info text"
$PLOOP info --json "$TMP/d" >"$TMP/info.json"
python3 - "$TMP/info.json" <<'EOF' || fail "info --json"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["type"] == "disk" and i["virtual_size"] == 104857600, i
assert i["cluster_size"] == 1048576 and i["format_version"] == 2, i
assert i["deltas"] == 1 and i["allocated_clusters"] == 0 and i["in_use"] is False, i
assert len(i["images"]) == 1 and i["images"][0]["file"] == "root.hds", i
EOF
# The descriptor file and the delta file are accepted too.
$PLOOP info --json "$TMP/d/DiskDescriptor.xml" | grep -q '"type": "disk"' || fail "info on xml"
$PLOOP info --json "$TMP/d/root.hds" | grep -q '"type": "delta"' || fail "info on delta"

# A v1 disk with 64 KiB clusters (128 sectors): qemu-img sees the same geometry.
$PLOOP init -t none -s 10M -v 1 -b 128 "$TMP/v1.hds"
python3 "$(dirname "$0")/ploop-image-tool.py" header "$TMP/v1.hds" | grep -q '"signature": "WithoutFreeSpace"' ||
  fail "-v 1 did not write a v1 signature"
[[ $($PLOOP info --json "$TMP/v1.hds" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster_size"])') == 65536 ]] ||
  fail "-b 128 is not a 64 KiB cluster"
rm -f "$TMP/v1.hds" "$TMP/DiskDescriptor.xml"

# --- check of a fresh disk and of its delta
$PLOOP check "$TMP/d" | grep -q 'clean' || fail "fresh disk not clean"
$PLOOP check -f "$TMP/d/root.hds" | grep -q 'clean' || fail "fresh delta not clean"
qemu-img check -f parallels "$TMP/d/root.hds" >/dev/null || fail "qemu-img check of a fresh image"

# --- the progress bar: drawn on a terminal, never into a pipe or file
if command -v script >/dev/null; then
  head -c $((8 << 20)) /dev/urandom >"$TMP/r.raw"
  script -qec "$PLOOP import '$TMP/r.raw' '$TMP/pb' >/dev/null" /dev/null >"$TMP/tty.out"
  grep -q 'import \[#*' "$TMP/tty.out" || fail "no progress bar on a terminal: $(cat -v "$TMP/tty.out")"
  $PLOOP export -o "$TMP/r2.raw" "$TMP/pb" 2>"$TMP/err.out" >/dev/null
  [[ ! -s $TMP/err.out ]] || fail "progress output on a non-terminal stderr"
  cmp "$TMP/r.raw" "$TMP/r2.raw" || fail "round trip of 8 MiB random"
  rm -rf "$TMP/pb" "$TMP/r.raw" "$TMP/r2.raw"
fi

# --- restore-descriptor: rebuild a lost descriptor from the image header
cp "$TMP/d/DiskDescriptor.xml" "$TMP/saved.xml"
rm "$TMP/d/DiskDescriptor.xml"
$PLOOP restore-descriptor "$TMP/d" "$TMP/d/root.hds"
$PLOOP info --json "$TMP/d" | grep -q '"virtual_size": 104857600' || fail "restored descriptor size"
expect_fail $PLOOP restore-descriptor "$TMP/d" "$TMP/d/root.hds" | grep -q 'exists' ||
  fail "restore-descriptor overwrote a descriptor"
expect_fail $PLOOP restore-descriptor "$TMP" "$TMP/d/root.hds" | grep -q 'not in directory' ||
  fail "restore-descriptor accepted an image outside DIR"
echo "ploop-cli: ok"
