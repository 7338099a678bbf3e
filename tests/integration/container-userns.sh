#!/usr/bin/env bash
# --userns: the container's root is host uid 100000 (0 100000 65536 map),
# yet owns its files through an id-mapped mount of the ploop disk's ext4;
# exec joins the user namespace too; nothing leaks.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"

ct create u1 --size 128M
out=$(ct run u1 --userns -- /bin/sh -c 'id -u; cat /proc/self/uid_map; echo mine > /root/f && cat /root/f; stat -c %u /root/f')
read -r uid map1 map2 map3 content owner <<<"$(echo $out)"
[[ $uid == 0 ]] || fail "uid inside: $uid"
[[ "$map1 $map2 $map3" == "0 100000 65536" ]] || fail "uid_map: $map1 $map2 $map3"
[[ $content == mine ]] || fail "container root cannot write its rootfs: $out"
[[ $owner == 0 ]] || fail "file owner inside: $owner"
# On disk the file belongs to uid 0 (the id mapping is the mount's, not the disk's).
[[ $(ct run u1 -- stat -c %u /root/f) == 0 ]] || fail "on-disk owner is not 0"
ct run u1 --userns -- /bin/sh -c 'grep -q idmapped /proc/mounts' || fail "rootfs not id-mapped"

ct start u1 --userns -- /bin/sh -c 'while :; do sleep 1; done'
wait_running u1
pid=$(ct list | awk '$1 == "u1" {print $3}')
[[ $(stat -c %u "/proc/$pid") == 100000 ]] || fail "PID 1 runs as host uid $(stat -c %u "/proc/$pid"), not 100000"
[[ $(ct exec u1 -- id -u) == 0 ]] || fail "exec is not root of the user namespace"
ct exec u1 -- /bin/sh -c 'echo exec > /root/g' || fail "exec cannot write"
# Host-only powers stay out of reach: the host's devices and kernel knobs.
ct exec u1 -- /bin/sh -c 'echo 1 > /proc/sys/kernel/sysrq' 2>/dev/null && fail "wrote a host sysctl"
ct stop u1 --timeout 0
assert_no_leaks u1
echo PASS
