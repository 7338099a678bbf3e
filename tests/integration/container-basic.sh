#!/usr/bin/env bash
# ploop-container run on a busybox rootfs on a ploop disk: PID 1 is the
# command; host processes, mounts, hostname and interfaces are invisible;
# privileges are cut; exit status and writes survive; nothing leaks.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"

ct create c1 --size 256M
[[ -f $CTROOT/c1/disk/DiskDescriptor.xml ]] || fail "create did not make a ploop disk"
grep -q "$CTROOT" /proc/mounts && fail "create left the disk mounted"

# PID 1 is the command itself.
out=$(ct run c1 -- /bin/sh -c 'echo $$')
[[ $out == 1 ]] || fail "PID 1 inside: expected 1, got '$out'"

# Host processes are invisible: the shell expands the glob itself, so PID 1 is all there is.
n=$(ct run c1 -- /bin/sh -c 'set -- /proc/[0-9]*; echo $#')
[[ $n -eq 1 ]] || fail "container sees $n processes"
ct run c1 -- /bin/sh -c "test ! -e /proc/$$" || fail "host pid $$ visible inside"

# Hostname: the name by default, --hostname otherwise; the host's is untouched.
[[ $(ct run c1 -- hostname) == c1 ]] || fail "default hostname is not the container name"
[[ $(ct run c1 --hostname box -- hostname) == box ]] || fail "--hostname not applied"
[[ $(hostname) != box ]] || fail "host hostname changed"

# Mounts: the rootfs is the ploop disk's ext4; no host path is visible.
mounts=$(ct run c1 -- cat /proc/mounts)
root_line=$(awk '$2 == "/"' <<<"$mounts")
[[ $root_line == /dev/loop*" / ext4 "* ]] || fail "root is not the disk's ext4: $root_line"
grep -qE " /(work|var/tmp|home|usr/lib) " <<<"$mounts" && fail "host mounts visible: $mounts"
grep -q " /sys sysfs ro," <<<"$mounts" || fail "/sys is not read-only"
ct run c1 -- /bin/sh -c 'test -c /dev/null && test -c /dev/zero && test -c /dev/full && test -c /dev/tty && test -c /dev/random && test -c /dev/urandom && test -d /dev/pts && test -d /dev/shm' \
  || fail "minimal /dev incomplete"
ct run c1 -- /bin/sh -c 'ls /dev' | grep -qE '^(vda|sda|loop0|mem|kmsg)$' && fail "host devices in /dev"

# Network: a private namespace with only lo, and lo is up.
ifs=$(ct run c1 -- ls /sys/class/net)
[[ $ifs == lo ]] || fail "interfaces inside: $ifs"
ct run c1 -- /bin/sh -c 'ip link show lo | grep -q UP' || fail "lo is not up"
ct run c1 -- ping -c1 -W1 127.0.0.1 >/dev/null || fail "cannot ping loopback"
hostifs=$(ct run c1 --net host -- ls /sys/class/net | wc -l)
[[ $hostifs -ge 1 ]] || fail "--net host shows no interfaces"

# Privileges: bounding set cut, no_new_privs set; cannot mount or mknod.
st=$(ct run c1 -- cat /proc/self/status)
bnd=$(awk '/^CapBnd/ {print $2}' <<<"$st")
(( (0x$bnd & (1 << 21)) == 0 )) || fail "CAP_SYS_ADMIN still in bounding set ($bnd)"
(( (0x$bnd & (1 << 27)) == 0 )) || fail "CAP_MKNOD still in bounding set ($bnd)"
grep -q '^NoNewPrivs:[[:space:]]*1' <<<"$st" || fail "no_new_privs not set"
ct run c1 -- mount -t tmpfs x /mnt 2>/dev/null && fail "mount allowed inside"
ct run c1 -- mknod /tmp/sda b 8 0 2>/dev/null && fail "mknod allowed inside"

# Exit status: the container's, 128+signal when killed.
rc=0; ct run c1 -- /bin/sh -c 'exit 7' || rc=$?
[[ $rc -eq 7 ]] || fail "exit 7 gave $rc"
# PID 1 cannot SIGKILL itself inside its namespace: kill it from the host.
"$PLOOP_CONTAINER" --root "$CTROOT" run c1 -- /bin/sh -c 'while :; do sleep 1; done' & runpid=$!
wait_running c1
kill -9 "$(ct list | awk '$1 == "c1" {print $3}')"
rc=0; wait $runpid || rc=$?
[[ $rc -eq 137 ]] || fail "SIGKILL of PID 1 gave $rc"
# Signals sent to run reach PID 1 (it has a handler, so it may act on them;
# until the trap is set a PID 1 ignores SIGTERM, so wait for it).
"$PLOOP_CONTAINER" --root "$CTROOT" run c1 -- /bin/sh -c 'trap "exit 42" TERM; touch /tmp/trapped; while :; do sleep 0.1; done' & runpid=$!
wait_running c1
for i in $(seq 100); do [[ -e $CTROOT/c1/rootfs/tmp/trapped ]] && break; sleep 0.1; done
kill -TERM $runpid
rc=0; wait $runpid || rc=$?
[[ $rc -eq 42 ]] || fail "SIGTERM forwarded: expected status 42, got $rc"
rc=0; ct run c1 -- /no/such/cmd 2>/dev/null || rc=$?
[[ $rc -eq 127 ]] || fail "missing command gave $rc"

# Writes land on the container's disk and survive runs.
ct run c1 -- /bin/sh -c 'echo persistent > /root/note; sync'
[[ $(ct run c1 -- cat /root/note) == persistent ]] || fail "write lost across runs"
[[ ! -e $CTROOT/c1/rootfs/root/note ]] || fail "file visible on the host mountpoint after stop"

# A pty on a terminal: the container's own devpts, status kept.
out=$(script -qec "$PLOOP_CONTAINER --root $CTROOT run c1 -- /bin/sh -c 'tty; exit 3'" /dev/null </dev/null | tr -d '\r') && rc=0 || rc=$?
[[ $out == */dev/pts/0* ]] || fail "no pty inside: '$out'"
[[ $rc -eq 3 ]] || fail "status through the pty: $rc"

assert_no_leaks c1
ct destroy c1
[[ ! -e $CTROOT/c1 ]] || fail "destroy left $CTROOT/c1"
echo PASS
