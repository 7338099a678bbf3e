#!/usr/bin/env bash
# create --from ROOTFS.tar[.gz]: a real rootfs tarball (pax long names, hard
# links, absolute symlinks that stay inside) runs; hostile tarballs (../,
# absolute names, symlinks pointing out, writes through a planted symlink)
# are refused with one line and leave nothing behind.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
requires python3

# A busybox rootfs tree, tarred by python's tarfile (GNU tar is not our peer
# for hostile archives: it refuses to write most of them).
python3 - "$TMP" <<'PY'
import io, os, subprocess, sys, tarfile
tmp = sys.argv[1]
applets = subprocess.run(["/bin/busybox", "--list-full"], capture_output=True, text=True).stdout.split()
def add_dir(t, name, mode=0o755):
    i = tarfile.TarInfo(name); i.type = tarfile.DIRTYPE; i.mode = mode; t.addfile(i)
def add_file(t, name, data, mode=0o644):
    i = tarfile.TarInfo(name); i.size = len(data); i.mode = mode; t.addfile(i, io.BytesIO(data))
def add_link(t, name, target, hard=False):
    i = tarfile.TarInfo(name); i.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE; i.linkname = target; t.addfile(i)

with tarfile.open(f"{tmp}/good.tar.gz", "w:gz", format=tarfile.PAX_FORMAT) as t:
    for d in ["./", "./bin", "./sbin", "./usr", "./usr/bin", "./usr/sbin", "./etc", "./root", "./tmp"]:
        add_dir(t, d)
    t.add("/bin/busybox", arcname="./bin/busybox")
    for a in applets:
        if a != "bin/busybox":
            add_link(t, "./" + a, "/bin/busybox")          # absolute, inside the root
    add_file(t, "./etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    long = "./usr/" + "d" * 120 + "/" + "f" * 120
    add_file(t, long, b"long name\n")                       # needs pax path
    add_link(t, "./root/hard", long[2:], hard=True)         # hard link to it
    add_link(t, "./etc/os-release", "../usr/lib/os-release")
    add_dir(t, "./usr/lib"); add_file(t, "./usr/lib/os-release", b"ID=test\n")

def bad(name, members):
    with tarfile.open(f"{tmp}/{name}.tar", "w", format=tarfile.GNU_FORMAT) as t:
        add_dir(t, "./etc")
        for m in members:
            m(t)
bad("dotdot", [lambda t: add_file(t, "../../escaped", b"x")])
bad("absolute", [lambda t: add_file(t, "/tmp/escaped-abs", b"x")])
bad("symlink-out", [lambda t: add_link(t, "etc/evil", "../../../../../etc/shadow")])
bad("symlink-abs-out", [lambda t: add_link(t, "etc/evil", "/../../../etc")])
bad("write-through", [lambda t: add_link(t, "etc/host", "/etc"), lambda t: add_file(t, "etc/host/escaped", b"x")])
bad("hardlink-out", [lambda t: add_link(t, "etc/hl", "../../etc/passwd", hard=True)])
with open(f"{tmp}/garbage.tar", "wb") as f:
    f.write(os.urandom(4096))
PY

ct create good --size 128M --from "$TMP/good.tar.gz"
[[ $(ct run good -- /bin/sh -c 'echo $$') == 1 ]] || fail "tarball rootfs does not run"
[[ $(ct run good -- cat /root/hard) == "long name" ]] || fail "pax long name / hard link lost"
[[ $(ct run good -- cat /etc/os-release) == "ID=test" ]] || fail "relative symlink lost"
[[ $(ct run good -- readlink /bin/ls) == /bin/busybox ]] || fail "absolute symlink inside the root changed"
ct destroy good

for t in dotdot absolute symlink-out symlink-abs-out write-through hardlink-out garbage; do
  err=$(expect_fail ct create "bad-$t" --size 64M --from "$TMP/$t.tar")
  echo "$t: $err"
  case $t in
    dotdot) [[ $err == *"'..'"* ]] || fail "$t: $err" ;;
    absolute) [[ $err == *absolute* ]] || fail "$t: $err" ;;
    symlink-out | symlink-abs-out) [[ $err == *"outside the root"* ]] || fail "$t: $err" ;;
    write-through) [[ $err == *symlink* ]] || fail "$t: $err" ;;
    hardlink-out) [[ $err == *"'..'"* ]] || fail "$t: $err" ;;
    garbage) [[ $err == *"tar"* ]] || fail "$t: $err" ;;
  esac
  [[ ! -e $CTROOT/bad-$t ]] || fail "$t: half-made container left in $CTROOT/bad-$t"
  assert_no_leaks "bad-$t"
done
[[ ! -e /escaped && ! -e /tmp/escaped-abs && ! -e /etc/escaped ]] || fail "a hostile member was written on the host"
[[ -z $(ct list | tail -n +2) ]] || fail "list shows leftovers: $(ct list)"
echo PASS
