#!/usr/bin/env bash
# No file outside a disk's directory is opened through its DiskDescriptor.xml:
# a delta that is a symlink to an outside file, a delta reached through a
# symlinked subdirectory, and a raw (Plain) base that is a symlink are refused
# by every verb (and by ploop-nbd before any client writes) with one line,
# and the outside files stay byte-identical. A FIFO in a delta's place fails
# every verb within a second instead of hanging. A symlink that stays inside
# the directory keeps working.
source "$(dirname "$0")/functions.sh"
requires python3
requires qemu-io
requires_root
[[ -x $PLOOP && -x $PLOOP_NBD ]] || skip "ploop / ploop-nbd not built in $BUILD"
export PLOOP_NO_PROGRESS=1
TOP_GUID='{5fbaabe3-6958-40ff-92a7-860e329aab41}'

# ---- templates: a disk with one snapshot (base + top), and a raw one -----
T=$TMP/tpl
mkdir -p "$T/ploop" "$T/raw" "$TMP/outside/dir"
$PLOOP init -t none -s 64M "$T/ploop/root.hds" >/dev/null
head -c 4M /dev/urandom >"$TMP/data.raw"
truncate -s 64M "$TMP/data.raw"
$PLOOP import "$TMP/data.raw" "$T/ploop" >/dev/null
SNAP=$($PLOOP snapshot "$T/ploop")
mkdir -p "$T/one"
$PLOOP init -t none -s 64M "$T/one/root.hds" >/dev/null
$PLOOP import "$TMP/data.raw" "$T/one" >/dev/null
$PLOOP init -t none -s 64M "$T/raw/root.hds" >/dev/null
$PLOOP import "$TMP/data.raw" "$T/raw" >/dev/null
$PLOOP convert -f raw "$T/raw" >/dev/null
# file_of DIR GUID: the File a descriptor gives an image.
file_of() {
  python3 - "$1/DiskDescriptor.xml" "$2" <<'EOF'
import sys, xml.etree.ElementTree as ET
for im in ET.parse(sys.argv[1]).iter('Image'):
    if im.findtext('GUID') == sys.argv[2]:
        print(im.findtext('File'))
EOF
}
TOPFILE=$(file_of "$T/ploop" "$TOP_GUID")
RAWFILE=$(file_of "$T/raw" "$TOP_GUID")
[[ -n $TOPFILE && -n $RAWFILE && $RAWFILE != root.hds ]] || fail "template disks: top '$TOPFILE', raw '$RAWFILE'"

# The outside files: a valid copy of the top delta and of the raw base, so
# a verb that followed the link would find something it can open and write.
O=$TMP/outside
cp "$T/ploop/$TOPFILE" "$O/top.hds"
cp "$T/ploop/$TOPFILE" "$O/dir/$TOPFILE"
cp "$T/raw/$RAWFILE" "$O/base.raw"
cp "$T/one/root.hds" "$O/one.hds"
outside_sum() { (cd "$O" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum; }
OUTSIDE=$(outside_sum)
mkdir -p "$TMP/pristine" && cp -a "$O/." "$TMP/pristine/"

# make_case KIND: a fresh copy of a template with the hole KIND in it.
make_case() {
  local d=$TMP/case
  rm -rf "$d"
  case $1 in
  symlink) cp -a "$T/ploop" "$d" && ln -sf "$O/top.hds" "$d/$TOPFILE" ;;
  relsymlink) cp -a "$T/ploop" "$d" && ln -sf "../outside/top.hds" "$d/$TOPFILE" ;;
  subdir)
    cp -a "$T/ploop" "$d" && rm "$d/$TOPFILE" && ln -s "$O/dir" "$d/sub"
    sed -i "s|<File>$TOPFILE</File>|<File>sub/$TOPFILE</File>|" "$d/DiskDescriptor.xml"
    ;;
  single) cp -a "$T/one" "$d" && ln -sf "$O/one.hds" "$d/root.hds" ;;
  plain) cp -a "$T/raw" "$d" && ln -sf "$O/base.raw" "$d/$RAWFILE" ;;
  fifo) cp -a "$T/ploop" "$d" && rm "$d/$TOPFILE" && mkfifo "$d/$TOPFILE" ;;
  inside) cp -a "$T/ploop" "$d" && mv "$d/$TOPFILE" "$d/real-top.hds" && ln -s real-top.hds "$d/$TOPFILE" ;;
  *) fail "make_case $1" ;;
  esac
  echo "$d"
}

bad=0
problem() { echo "BAD: $*"; bad=$((bad + 1)); }

# args_of VERB DISK: sets A to the verb's command line for DISK.
args_of() {
  local d=$2
  case $1 in
  info) A=(info "$d") ;;
  check) A=(check -f "$d") ;;
  check-r) A=(check -r "$d") ;;
  check-repair) A=(check -F -d "$d") ;;
  snapshot) A=(snapshot "$d") ;;
  snapshot-merge) A=(snapshot-merge "$d") ;;
  snapshot-merge-all) A=(snapshot-merge -A "$d") ;;
  snapshot-delete) A=(snapshot-delete -u "$SNAP" "$d") ;;
  snapshot-switch) A=(snapshot-switch -u "$SNAP" "$d") ;;
  resize) A=(resize -s 128M "$d") ;;
  export) A=(export -o "$TMP/out.raw" "$d") ;;
  import) A=(import "$TMP/data.raw" "$d") ;;
  convert-v1) A=(convert -v 1 "$d") ;;
  convert-raw) A=(convert -f raw "$d") ;;
  convert-ploop1) A=(convert -f ploop1 "$d") ;;
  compact) A=(compact "$d") ;;
  mount) A=(mount "$d") ;;
  *) fail "args_of $1" ;;
  esac
}
VERBS="info check check-r snapshot snapshot-merge snapshot-merge-all snapshot-delete snapshot-switch resize
  export import convert-v1 convert-raw convert-ploop1 compact mount"

# try KIND VERB: VERB on a fresh disk with hole KIND fails at once with one
# line (within a second), and nothing outside changed.
try() {
  local kind=$1 verb=$2 d err rc=0 t0 ms
  d=$(make_case "$kind")
  rm -f "$TMP/out.raw"
  t0=$(date +%s%N)
  args_of "$verb" "$d"
  err=$(timeout 5 $PLOOP "${A[@]}" 2>&1 >/dev/null) || rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  if [[ $verb == mount && $rc -eq 0 ]]; then $PLOOP umount "$d" >/dev/null 2>&1 || true; fi
  if [[ $rc -eq 0 ]]; then
    problem "$kind/$verb succeeded"
  elif [[ $rc -eq 124 ]]; then
    problem "$kind/$verb hung (killed after 5 s)"
  elif [[ $(printf '%s\n' "$err" | grep -c .) -ne 1 ]]; then
    problem "$kind/$verb: not a one-line error: $err"
  elif ((ms > 1000)); then
    problem "$kind/$verb took $ms ms"
  else
    echo "  $kind/$verb (${ms} ms): $err"
  fi
  if [[ $(outside_sum) != "$OUTSIDE" ]]; then
    problem "$kind/$verb changed a file outside the disk's directory"
    cp -a "$TMP/pristine/." "$O/"
  fi
  [[ ! -e $TMP/out.raw ]] || problem "$kind/$verb left an export behind"
}

# serve KIND: ploop-nbd refuses the disk at start; had it served, a client
# write would have gone to the outside file.
serve() {
  local kind=$1 d sock=$TMP/nbd.sock pid rc=0 t0 ms
  d=$(make_case "$kind")
  rm -f "$sock"
  t0=$(date +%s%N)
  timeout 5 $PLOOP_NBD -U "$sock" "$d" 2>"$TMP/nbd.err" &
  pid=$!
  for _ in $(seq 30); do
    [[ -S $sock ]] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if [[ -S $sock ]]; then
    qemu-io -f raw -c 'write -P 0x5a 0 1M' -c flush "nbd+unix:///?socket=$sock" >/dev/null 2>&1 || true
    kill $pid 2>/dev/null
    wait $pid 2>/dev/null || true
    problem "$kind/ploop-nbd served the disk"
  else
    wait $pid || rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    if [[ $rc -eq 0 || $rc -eq 124 ]]; then
      problem "$kind/ploop-nbd: exit $rc"
    elif [[ $(grep -c . "$TMP/nbd.err") -ne 1 ]]; then
      problem "$kind/ploop-nbd: not a one-line error: $(cat "$TMP/nbd.err")"
    elif ((ms > 1000)); then
      problem "$kind/ploop-nbd took $ms ms"
    else
      echo "  $kind/ploop-nbd (${ms} ms): $(cat "$TMP/nbd.err")"
    fi
  fi
  if [[ $(outside_sum) != "$OUTSIDE" ]]; then
    problem "$kind/ploop-nbd changed a file outside the disk's directory"
    cp -a "$TMP/pristine/." "$O/"
  fi
}

echo "== single (one image: the format conversions run)"
for verb in convert-raw convert-v1 export mount; do try single "$verb"; done
for kind in symlink relsymlink subdir plain fifo; do
  echo "== $kind"
  for verb in $VERBS; do
    # A raw base has no snapshot and no v1/v2 format: those verbs fail anyway.
    [[ $kind == plain ]] && case $verb in snapshot-delete | snapshot-switch | convert-v1) continue ;; esac
    try "$kind" "$verb"
  done
  serve "$kind"
done

echo "== bare delta: a FIFO named on the command line"
mkfifo "$TMP/bare.hds"
for cmd in "info" "check -f" "export -o $TMP/out.raw"; do
  t0=$(date +%s%N)
  rc=0
  # shellcheck disable=SC2086
  err=$(timeout 5 $PLOOP $cmd "$TMP/bare.hds" 2>&1 >/dev/null) || rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  if [[ $rc -eq 0 || $rc -eq 124 || $ms -gt 1000 || $(grep -c . <<<"$err") -ne 1 ]]; then
    problem "bare FIFO/$cmd: rc=$rc, $ms ms: $err"
  else
    echo "  bare FIFO/$cmd (${ms} ms): $err"
  fi
done

echo "== the lock file and the descriptor's .tmp are never written through a symlink"
d=$(make_case inside)
ln -sf "$O/top.hds" "$d/DiskDescriptor.xml.lck"
for verb in snapshot resize import check-repair; do  # -r is read-only (OpenVZ): no lock
  args_of "$verb" "$d"
  rc=0
  err=$(timeout 5 $PLOOP "${A[@]}" 2>&1 >/dev/null) || rc=$?
  if [[ $rc -eq 0 || $rc -eq 124 || $(grep -c . <<<"$err") -ne 1 ]] || ! grep -q "lock file" <<<"$err"; then
    problem "lock symlink/$verb: rc=$rc: $err"
  else
    echo "  lock symlink/$verb: $err"
  fi
done
rm "$d/DiskDescriptor.xml.lck"
ln -sf "$O/top.hds" "$d/DiskDescriptor.xml.tmp"
$PLOOP snapshot "$d" >/dev/null || problem "snapshot beside a stale .tmp symlink failed"
[[ ! -L $d/DiskDescriptor.xml && -f $d/DiskDescriptor.xml ]] || problem "the descriptor became a symlink"
[[ $(outside_sum) == "$OUTSIDE" ]] || problem "the lock or .tmp write went outside"

echo "== a symlink inside the directory still works"
d=$(make_case inside)
$PLOOP check -f "$d" >/dev/null || problem "inside symlink: check failed"
$PLOOP export -o "$TMP/in.raw" "$d" >/dev/null || problem "inside symlink: export failed"
cmp -s "$TMP/in.raw" "$TMP/data.raw" || problem "inside symlink: export differs from the data"
$PLOOP snapshot "$d" >/dev/null || problem "inside symlink: snapshot failed"

[[ $(outside_sum) == "$OUTSIDE" ]] || fail "files outside changed"
((bad == 0)) || fail "$bad verb(s) reached outside the directory, hung or failed badly"
echo "path-safety: OK"
