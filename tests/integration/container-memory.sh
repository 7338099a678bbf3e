#!/usr/bin/env bash
# VSwap-style limits: a memory hog with --memory 64M --swap 0 is OOM-killed
# and reported while the host and another container go on; with --swap it
# uses swap (host swap file made here; that part skips if swapon fails);
# the limits land in the cgroup files; --pids stops a fork bomb.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"

# The container's memory cgroup directory (v1 memory hierarchy, else v2).
memcg() {
  local d
  d=$(find /sys/fs/cgroup/memory -maxdepth 3 -type d -path "*ploop-container*" -name "$1" 2>/dev/null | head -1)
  [[ -n $d ]] || d=$(find /sys/fs/cgroup -maxdepth 3 -type d -path "*ploop-container*" -name "$1" -not -path "*/unified/*" | head -1)
  echo "$d"
}
# A shell that holds N bytes in a variable (busybox has no other allocator at hand).
hog() { echo "x=\$(head -c $1 /dev/zero | tr '\\0' a); echo held \${#x}; ${2:-}"; }

ct create m1 --size 128M
ct create m2 --size 128M
ct start m2 -- /bin/sh -c 'while :; do echo alive > /tmp/a; sleep 0.2; done'
wait_running m2

# Limits land where the kernel reads them.
ct start m1 --memory 64M --swap 32M --pids 50 -- /bin/sh -c 'while :; do sleep 1; done'
wait_running m1
cg=$(memcg m1)
[[ -n $cg ]] || fail "no memory cgroup for m1"
if [[ -f $cg/memory.limit_in_bytes ]]; then
  [[ $(cat "$cg/memory.limit_in_bytes") -eq $((64 << 20)) ]] || fail "memory.limit_in_bytes $(cat "$cg/memory.limit_in_bytes")"
  if [[ -f $cg/memory.memsw.limit_in_bytes ]]; then
    [[ $(cat "$cg/memory.memsw.limit_in_bytes") -eq $((96 << 20)) ]] || fail "memsw limit is not RAM+swap"
  fi
else
  [[ $(cat "$cg/memory.max") -eq $((64 << 20)) ]] || fail "memory.max $(cat "$cg/memory.max")"
  [[ $(cat "$cg/memory.swap.max") -eq $((32 << 20)) ]] || fail "memory.swap.max $(cat "$cg/memory.swap.max")"
fi
pcg=$(find /sys/fs/cgroup -maxdepth 3 -type d -path "*ploop-container*" -name m1 -path "*pids*" | head -1)
[[ -z $pcg ]] && pcg=$cg
[[ $(cat "$pcg/pids.max") -eq 50 ]] || fail "pids.max $(cat "$pcg/pids.max")"
ct list | awk '$1 == "m1"' | grep -q '/64.0M' || fail "list does not show the 64M limit: $(ct list)"
ct stop m1 --timeout 0

# Within the limit: fine.
[[ $(ct run m1 --memory 64M --swap 0 -- /bin/sh -c "$(hog 10485760)") == "held 10485760" ]] || fail "10M in a 64M container failed"

# Beyond it with no swap: OOM-killed, reported, nothing else hurt.
rc=0; out=$(ct run m1 --memory 64M --swap 0 -- /bin/sh -c "$(hog 209715200)" 2>&1) || rc=$?
[[ $rc -eq 137 ]] || fail "hog exit status $rc (want 137): $out"
[[ $out == *"out of memory"*"OOM-killed"* ]] || fail "OOM not reported: $out"
[[ $out != *held* ]] || fail "hog survived"
ct list | awk '$1 == "m1"' | grep -q "OOM-killed" || fail "list does not report the OOM kill"
[[ $(ct list | awk '$1 == "m2" {print $2}') == running ]] || fail "the other container died"
before=$(stat -c %Y "$CTROOT/m2/rootfs/tmp/a" 2>/dev/null || echo 0)
true  # the host still forks and runs
assert_no_leaks m1

# A fork bomb stops at --pids: the inner shell fails to fork, PID 1 goes on.
out=$(ct run m1 --pids 10 -- /bin/sh -c '/bin/sh -c "for i in \$(seq 40); do sleep 3 & done" 2>/dev/null; echo inner=$?; set -- /proc/[0-9]*; echo procs=$#')
[[ $out == *inner=2* ]] || fail "fork bomb not stopped: $out"
procs=${out##*procs=}
[[ $procs -le 10 ]] || fail "$procs processes under --pids 10"

# With swap: the same kind of hog (a 96M string peaks near 200M in ash) fits
# in RAM+swap and really swaps.
swapfile=$TMP/swapfile
if ! { dd if=/dev/zero of="$swapfile" bs=1M count=640 status=none && chmod 600 "$swapfile" &&
       mkswap "$swapfile" >/dev/null 2>&1 && swapon "$swapfile" 2>/dev/null; }; then
  echo "NOTE: swapon failed on this host: skipping the --swap part"
else
  # Containers first: a live 64M container cannot take its swapped pages back (ENOMEM).
  cleanup "_ct_cleanup; swapoff '$swapfile'"
  ct start m1 --memory 64M --swap 448M -- /bin/sh -c "$(hog 100663296 'echo done > /tmp/filled; while :; do sleep 1; done')"
  wait_running m1
  cg=$(memcg m1)
  for i in $(seq 900); do [[ -e $CTROOT/m1/rootfs/tmp/filled ]] && break; sleep 0.1; done
  [[ -e $CTROOT/m1/rootfs/tmp/filled ]] || fail "hog with swap did not finish: $(cat "$CTROOT/m1/console.log")"
  if [[ -f $cg/memory.stat && -f $cg/memory.memsw.usage_in_bytes ]]; then
    swapped=$(awk '$1 == "swap" {print $2}' "$cg/memory.stat")
  else
    swapped=$(cat "$cg/memory.swap.current")
  fi
  [[ $swapped -gt $((32 << 20)) ]] || fail "container swapped only $swapped bytes"
  echo "swap in use by m1: $((swapped >> 20)) MiB"
  ct stop m1 --timeout 0
  ! ct list | awk '$1 == "m1"' | grep -q OOM || fail "hog with swap was OOM-killed"
fi

[[ $(ct list | awk '$1 == "m2" {print $2}') == running ]] || fail "the other container died"
ct stop m2 --timeout 0
assert_no_leaks m1
assert_no_leaks m2
echo PASS
