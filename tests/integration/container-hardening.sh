#!/usr/bin/env bash
# Hardening checked from inside a container: CapInh and CapAmb are 0, the
# default seccomp filter makes keyctl/add_key/bpf/perf_event_open/
# open_by_handle_at/init_module/kexec_load/unshare(CLONE_NEWUSER) fail with
# EPERM (a static C helper built here calls them), in PID 1's tree and in
# `exec`; mknod and mount fail; the host's files are out of reach;
# --seccomp unconfined lets the calls through to the kernel's own answer;
# --cap-drop/--cap-add change CapEff; --read-only refuses writes but /tmp;
# --userns containers may nest user namespaces.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
requires cc

cat > "$TMP/sys.c" <<'C'
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static void show(const char *n, long rc) { printf("%s=%s\n", n, rc < 0 ? strerrorname_np(errno) : "ok"); }
int main(void)
{
  char attr[128] = {0};
  show("keyctl", syscall(SYS_keyctl, 9999, 0, 0, 0, 0));
  show("add_key", syscall(SYS_add_key, "user", "ct-test", "v", 1, -2));
  show("bpf", syscall(SYS_bpf, 9999, attr, 16));
  show("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
  show("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, NULL, 0));
  show("init_module", syscall(SYS_init_module, NULL, 0, ""));
  show("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0xffffffffUL));
  show("unshare_user", unshare(CLONE_NEWUSER));
  show("clone3", syscall(SYS_clone3, NULL, 0));
  return 0;
}
C
cc -static -O2 -o "$TMP/sys" "$TMP/sys.c" 2>"$TMP/cc.log" || skip "cannot build a static helper: $(head -1 "$TMP/cc.log")"
denied=(keyctl add_key bpf perf_event_open open_by_handle_at init_module kexec_load unshare_user)

ct create h --size 128M
ct mount h
cp "$TMP/sys" "$CTROOT/h/rootfs/bin/syscalls"
ct umount h
echo secret > "$TMP/host-secret"
capmask() { awk -v k="$1:" '$1 == k {print $2}' <<<"$2"; }
has_cap() { (( (16#$1 >> $2) & 1 )); }

# Default: everything denied from PID 1's tree.
out=$(ct run h -- /bin/sh -c "grep Cap /proc/self/status; /bin/syscalls
  mknod /tmp/n c 1 3 2>/dev/null && echo mknod=ok || echo mknod=fail
  mount -t tmpfs none /mnt 2>/dev/null && echo mount=ok || echo mount=fail
  cat '$TMP/host-secret' 2>/dev/null && echo host=reached || echo host=unreachable
  ls /proc/1/root'$TMP' >/dev/null 2>&1 && echo host2=reached || echo host2=unreachable
  echo x > /etc/written && echo write=ok")
echo "$out"
[[ $(capmask CapInh "$out") == 0000000000000000 ]] || fail "CapInh not cleared"
[[ $(capmask CapAmb "$out") == 0000000000000000 ]] || fail "CapAmb not cleared"
eff=$(capmask CapEff "$out")
has_cap "$eff" 0 || fail "CHOWN missing from the default set ($eff)"
! has_cap "$eff" 21 || fail "SYS_ADMIN in the default set ($eff)"
! has_cap "$eff" 27 || fail "MKNOD in the default set ($eff)"
for s in "${denied[@]}"; do
  grep -qx "$s=EPERM" <<<"$out" || fail "$s not denied with EPERM: $(grep "^$s=" <<<"$out")"
done
grep -qx "clone3=ENOSYS" <<<"$out" || fail "clone3 is not ENOSYS (libc must fall back to clone)"
for k in mknod=fail mount=fail host=unreachable host2=unreachable write=ok; do
  grep -qx "$k" <<<"$out" || fail "want $k"
done
grep -qv ^ "$CTROOT/h/rootfs/etc/written" 2>/dev/null || true

# exec gets the same filter and capabilities as PID 1.
ct start h -- /bin/sh -c 'while :; do sleep 1; done'
wait_running h
out=$(ct exec h -- /bin/sh -c 'grep Cap /proc/self/status; /bin/syscalls')
[[ $(capmask CapInh "$out") == 0000000000000000 ]] || fail "exec: CapInh not cleared"
for s in "${denied[@]}"; do grep -qx "$s=EPERM" <<<"$out" || fail "exec: $s not denied"; done
ct stop h --timeout 0

# Unconfined: the kernel's own answers come back (no EPERM from a filter).
out=$(ct run h --seccomp unconfined -- /bin/syscalls)
echo "$out"
for s in keyctl bpf perf_event_open open_by_handle_at unshare_user clone3; do
  ! grep -qx "$s=EPERM" <<<"$out" || fail "--seccomp unconfined: $s still EPERM"
  ! grep -qx "$s=ENOSYS" <<<"$out" || [[ $s != clone3 ]] || fail "--seccomp unconfined: clone3 still ENOSYS"
done

# --cap-drop / --cap-add.
out=$(ct run h --cap-drop CHOWN --cap-add net_admin -- /bin/sh -c \
  'grep Cap /proc/self/status; touch /tmp/f; chown 1 /tmp/f 2>/dev/null && echo chown=ok || echo chown=fail')
eff=$(capmask CapEff "$out")
! has_cap "$eff" 0 || fail "--cap-drop CHOWN left it in CapEff ($eff)"
has_cap "$eff" 12 || fail "--cap-add net_admin not in CapEff ($eff)"
grep -qx chown=fail <<<"$out" || fail "chown worked without CAP_CHOWN"

# --read-only: the root refuses writes, /tmp takes them.
rm -f "$CTROOT/h/rootfs/etc/ro-test" 2>/dev/null || true
out=$(ct run h --read-only -- /bin/sh -c \
  'echo x > /etc/ro-test 2>/dev/null && echo root=written || echo root=refused; echo y > /tmp/y && echo tmp=written')
grep -qx root=refused <<<"$out" || fail "--read-only root took a write"
grep -qx tmp=written <<<"$out" || fail "--read-only: /tmp not writable"
ct mount h
[[ ! -e $CTROOT/h/rootfs/etc/ro-test ]] || fail "--read-only: the file reached the disk"
ct umount h

# A --userns container may make user namespaces of its own; the rest stays denied.
if out=$(ct run h --userns -- /bin/syscalls 2>&1); then
  grep -qx unshare_user=ok <<<"$out" || fail "--userns: nested user namespace refused: $out"
  grep -qx keyctl=EPERM <<<"$out" || fail "--userns: keyctl allowed"
else
  echo "NOTE: --userns did not run here ($out)"
fi

# Bad flags: one line, usage exit code.
for args in "--cap-add NOPE" "--cap-drop" "--seccomp lax"; do
  rc=0; expect_fail ct run h $args -- true >/dev/null || true
  ct run h $args -- true 2>/dev/null || rc=$?
  [[ $rc -eq 2 ]] || fail "run h $args: exit $rc, want 2"
done
assert_no_leaks h
echo PASS
