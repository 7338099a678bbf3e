#!/usr/bin/env bash
# Bad input: truncated files, wrong signature, absurd header fields, BAT
# entries past EOF, into the header/BAT, or shared by two clusters, and
# descriptors whose File leaves the directory.  Every verb that meets one gives
# a one-line error naming the problem and changes nothing on disk; `check`
# reports the damage (exit 11), and `check -F -d` repairs what it can.
source "$(dirname "$0")/functions.sh"
requires python3
requires qemu-img
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
TOOL="python3 $(dirname "$0")/ploop-image-tool.py"
export PLOOP_NO_PROGRESS=1

$TOOL mkraw "$TMP/src.raw" $((8 << 20)) 3 0 # 8 MiB, every cluster holds data
$PLOOP import "$TMP/src.raw" "$TMP/good" >/dev/null
dd if=/dev/zero of="$TMP/zero.raw" bs=1M count=8 status=none

# Checksum of every file of a disk but its lock file (which names the last holder's pid).
tree_sum() { (cd "$1" && find . -type f ! -name '*.lck' -print0 | sort -z | xargs -0 sha256sum) | sha256sum; }

# fresh NAME: a copy of the good disk to damage.
fresh() {
  rm -rf "$TMP/$1"
  cp -a "$TMP/good" "$TMP/$1"
  echo "$TMP/$1"
}

# refused DIR REGEX VERB...: every listed verb fails with one line matching
# REGEX (case-insensitive) and leaves every file of DIR byte-identical.
refused() {
  local dir=$1 re=$2 before msg
  shift 2
  before=$(tree_sum "$dir")
  for verb in "$@"; do
    case $verb in
    info) msg=$(expect_fail $PLOOP info "$dir") ;;
    export) msg=$(expect_fail $PLOOP export -o "$TMP/out.raw" "$dir") ;;
    import) msg=$(expect_fail $PLOOP import "$TMP/zero.raw" "$dir") ;;
    snapshot) msg=$(expect_fail $PLOOP snapshot "$dir") ;;
    resize) msg=$(expect_fail $PLOOP resize -s 16M "$dir") ;;
    check) msg=$(expect_fail $PLOOP check -f "$dir") ;;
    check-ro) msg=$(expect_fail $PLOOP check -f --ro "$dir") ;;
    *) fail "refused: unknown verb $verb" ;;
    esac
    echo "  $verb: $msg"
    grep -qiE "$re" <<<"$msg" || fail "$verb on $dir: message '$msg' does not match /$re/"
    [[ ! -e $TMP/out.raw ]] || fail "$verb on $dir left a partial export behind"
    [[ $(tree_sum "$dir") == "$before" ]] || fail "$verb on $dir changed files on disk"
  done
}

echo "== wrong signature"
d=$(fresh badsig)
$TOOL poke "$d/root.hds" 0 bytes "NotAPloopImage!!"
refused "$d" 'signature|not a ploop' info export import snapshot check-ro

echo "== truncated inside the header"
d=$(fresh trunc-header)
truncate -s 40 "$d/root.hds"
refused "$d" 'trunc|short|too small|header' info export import snapshot check-ro

echo "== truncated inside the data (BAT points past EOF)"
d=$(fresh trunc-data)
truncate -s $((5 << 20)) "$d/root.hds"
refused "$d" 'EOF|end of (the )?file|beyond|past|trunc' export import snapshot check-ro check

echo "== file size not a whole number of clusters"
d=$(fresh unaligned)
truncate -s $(($(stat -c %s "$d/root.hds") - 4096)) "$d/root.hds"
refused "$d" 'EOF|end of (the )?file|beyond|past|trunc|align|cluster' export check-ro

echo "== BAT entry past EOF"
d=$(fresh bat-eof)
$TOOL bat-set "$d/root.hds" 2 100000
refused "$d" 'EOF|end of (the )?file|beyond|past' export import snapshot check-ro check

echo "== BAT entry holding the reserved value 0xFFFFFFFF"
d=$(fresh bat-reserved)
$TOOL bat-set "$d/root.hds" 4 0xFFFFFFFF
refused "$d" 'EOF|beyond|past|reserved|invalid' export import check-ro

echo "== BAT entry pointing into the BAT itself"
# 32 KiB clusters and 512 MiB: the BAT spans three clusters, so cluster 1 is BAT.
$PLOOP import -s 512M -b 64 "$TMP/src.raw" "$TMP/bigbat" >/dev/null
[[ $($TOOL header "$TMP/bigbat/root.hds" | python3 -c 'import json,sys; print(json.load(sys.stdin)["first_block"])') -ge 128 ]] ||
  fail "expected a BAT of several clusters"
$TOOL bat-set "$TMP/bigbat/root.hds" 0 1
refused "$TMP/bigbat" 'header|BAT|metadata|index' export import check-ro check

echo "== two BAT entries sharing one cluster"
d=$(fresh bat-dup)
read -r _ v <<<"$($TOOL first-allocated "$d/root.hds")"
$TOOL bat-set "$d/root.hds" 5 "$v"
refused "$d" 'twice|duplicate|shared|more than once|same cluster' export import snapshot check-ro check

echo "== absurd header fields"
d=$(fresh hdr-cluster)
$TOOL poke "$d/root.hds" 28 I 7 # m_Sectors (cluster size) 7 sectors
refused "$d" 'cluster|block ?size|sectors' info export import check-ro
d=$(fresh hdr-size)
$TOOL poke "$d/root.hds" 36 Q 0xFFFFFFFFFFFF # virtual size 128 PiB
refused "$d" 'size|BAT|entries' info export import check-ro
d=$(fresh hdr-type)
$TOOL poke "$d/root.hds" 16 I 5 # m_Type must be 2
refused "$d" 'type' info export import check-ro

echo "== descriptor File leaving the directory"
pw=$(sum /etc/passwd)
cp "$TMP/good/root.hds" "$TMP/outside.hds"
outside=$(sum "$TMP/outside.hds")
for bad in '../outside.hds' '/etc/passwd' 'a/../../x.hds'; do
  d=$(fresh desc-path)
  sed -i "s|<File>root.hds</File>|<File>$bad</File>|" "$d/DiskDescriptor.xml"
  grep -q "<File>$bad</File>" "$d/DiskDescriptor.xml" || fail "sed did not patch the descriptor"
  refused "$d" 'outside|leave|escape|absolute|\.\.|path' info export import snapshot check-ro
  [[ $(sum /etc/passwd) == "$pw" && $(sum "$TMP/outside.hds") == "$outside" ]] ||
    fail "a verb wrote through a descriptor path leaving its directory"
done

echo "== descriptor that is not XML, or names a missing file"
d=$(fresh desc-junk)
echo "this is not xml" >"$d/DiskDescriptor.xml"
refused "$d" 'xml|parse|descriptor' info export import snapshot
d=$(fresh desc-missing)
sed -i 's|<File>root.hds</File>|<File>gone.hds</File>|' "$d/DiskDescriptor.xml"
refused "$d" 'gone.hds|no such|missing|not found' info export import snapshot

echo "== export never overwrites a file without -f, nor an input"
expect_fail $PLOOP export -o "$TMP/src.raw" "$TMP/good" | grep -q exists || fail "export overwrote"
before=$(tree_sum "$TMP/good")
expect_fail $PLOOP export -f -o "$TMP/good/root.hds" "$TMP/good" | grep -q 'is an image of' ||
  fail "export -f onto the disk's own image"
expect_fail $PLOOP export -f -o "$TMP/good/root.hds" "$TMP/good/root.hds" | grep -q 'being exported' ||
  fail "export -f of a delta onto itself"
[[ $(tree_sum "$TMP/good") == "$before" ]] || fail "export onto its input changed it"

echo "== check -F -d repairs a BAT entry past EOF, and the result is consistent"
d=$(fresh repair)
$TOOL bat-set "$d/root.hds" 2 100000
out=$($PLOOP check -F -d "$d") || fail "check -F -d did not repair: $out"
grep -qi repaired <<<"$out" || fail "check -F -d said nothing about a repair: $out"
$PLOOP check -f "$d" | grep -q clean || fail "not clean after repair"
qemu-img check -f parallels "$d/root.hds" >/dev/null || fail "qemu-img check after repair"
$PLOOP export -o "$TMP/rep.raw" "$d" >/dev/null
# Cluster 2 was cut loose: it reads as zeros now; all others keep their data.
cmp -n $((2 << 20)) "$TMP/src.raw" "$TMP/rep.raw" || fail "repair damaged clusters 0-1"
cmp -i $((3 << 20)) "$TMP/src.raw" "$TMP/rep.raw" || fail "repair damaged clusters 3.."
cmp -i $((2 << 20)):0 -n $((1 << 20)) "$TMP/rep.raw" /dev/zero || fail "cleared cluster not zero"
rm -f "$TMP/rep.raw"

echo "== lost clusters are reported but are not corruption"
d=$(fresh lost)
$TOOL bat-set "$d/root.hds" 6 0
out=$($PLOOP check -f --ro "$d/root.hds") || fail "lost cluster treated as corruption: $out"
grep -qi lost <<<"$out" || fail "lost cluster not reported: $out"
echo "ploop-bad-input: ok"
