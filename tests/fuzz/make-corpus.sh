#!/usr/bin/env bash
# Regenerates the seed corpora in tests/fuzz/corpus/ with the project's own
# tools (build/bin/ploop; PLOOP_BUILD=DIR for another build), python3's
# tarfile and make-nbd-seeds.py. Seeds stay small (32 KiB clusters, tiny
# disks) so that libFuzzer's mutations stay cheap.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
ploop="$top/${PLOOP_BUILD:-build}/bin/ploop"
[[ -x $ploop ]] || { echo "make-corpus: build $ploop first (make all)" >&2; exit 1; }
out="$here/corpus"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out"/{delta,descriptor,nbd,stream,tar}

# A raw source with data in clusters 0 and 2 (32 KiB clusters).
python3 - "$tmp/src.raw" <<'PY'
import sys
b = bytearray(128 << 10)
b[0:512] = b"\xab" * 512
b[65536 + 100:65536 + 612] = b"\xcd" * 512
open(sys.argv[1], "wb").write(b)
PY

# delta: empty v2 and v1, one with data, one whose BAT spans 4 clusters.
mkdir -p "$tmp"/{e2,e1,big,data}
"$ploop" init -t none -s 1M -b 64 "$tmp/e2/root.hds" >/dev/null
"$ploop" init -t none -s 1M -b 64 -v 1 "$tmp/e1/root.hds" >/dev/null
"$ploop" init -t none -s 1G -b 64 "$tmp/big/root.hds" >/dev/null

"$ploop" import -b 64 "$tmp/src.raw" "$tmp/data" >/dev/null
cp "$tmp/e2/root.hds" "$out/delta/empty-v2"
cp "$tmp/e1/root.hds" "$out/delta/empty-v1"
cp "$tmp/big/root.hds" "$out/delta/bat-4-clusters"
cp "$tmp/data/root.hds" "$out/delta/data-v2"

# descriptor: fresh, after two snapshots, and the example of formats/.
cp "$tmp/e2/DiskDescriptor.xml" "$out/descriptor/fresh.xml"
s1=$("$ploop" snapshot "$tmp/data")
python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(40000); f.write(b"\x11"*700)' "$tmp/src.raw"
"$ploop" import "$tmp/src.raw" "$tmp/data" >/dev/null
s2=$("$ploop" snapshot "$tmp/data")
cp "$tmp/data/DiskDescriptor.xml" "$out/descriptor/two-snapshots.xml"
sed -n '/^```xml$/,/^```$/p' "$top/formats/disk-descriptor.md" | sed '1d;$d' >"$out/descriptor/spec-example.xml"

# stream: full, compressed, the chain with snapshots, an incremental one.
"$ploop" send -o "$out/stream/full" "$tmp/data" 2>/dev/null
"$ploop" send --compress -o "$out/stream/full-compressed" "$tmp/data" 2>/dev/null
"$ploop" send --snapshots -o "$out/stream/snapshots" "$tmp/data" 2>/dev/null
"$ploop" send -o "$out/stream/empty" "$tmp/e2" 2>/dev/null
"$ploop" send -u "$s2" --since "$s1" -o "$out/stream/incremental" "$tmp/data" 2>/dev/null

# tar: ustar, GNU (long names) and pax, with every member type we extract.
python3 - "$out/tar" <<'PY'
import io, sys, tarfile
out = sys.argv[1]
def build(fmt, name, gz=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=fmt) as t:
        def add(ti, data=None):
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
        d = tarfile.TarInfo("etc"); d.type = tarfile.DIRTYPE; d.mode = 0o755; add(d)
        f = tarfile.TarInfo("etc/hostname"); data = b"ct\n"; f.size = len(data); f.mode = 0o644; add(f, data)
        s = tarfile.TarInfo("etc/link"); s.type = tarfile.SYMTYPE; s.linkname = "hostname"; add(s)
        h = tarfile.TarInfo("etc/hard"); h.type = tarfile.LNKTYPE; h.linkname = "etc/hostname"; add(h)
        p = tarfile.TarInfo("run/fifo"); p.type = tarfile.FIFOTYPE; p.mode = 0o600; add(p)
        if fmt != tarfile.USTAR_FORMAT:
            ln = tarfile.TarInfo("d/" + "x" * 150 + "/file"); data = b"long\n"; ln.size = len(data); add(ln, data)
    open(f"{out}/{name}", "wb").write(buf.getvalue())
build(tarfile.USTAR_FORMAT, "ustar")
build(tarfile.GNU_FORMAT, "gnu")
build(tarfile.PAX_FORMAT, "pax")
build(tarfile.USTAR_FORMAT, "ustar.gz", gz=True)
PY

python3 "$here/make-nbd-seeds.py" "$out/nbd"
du -sh "$out"/*
