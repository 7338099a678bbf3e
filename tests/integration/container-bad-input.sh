#!/usr/bin/env bash
# Bad input to ploop-container: one clear line on stderr, the documented
# exit code, and nothing half-made (no directory, mount, cgroup, loop).
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"

code() { local rc=0; "$@" >/dev/null 2>&1 || rc=$?; echo $rc; }

ct create ok --size 64M

# Unknown containers: exit 3, for every verb that takes a name.
for verb in run start stop exec freeze thaw snapshot destroy mount umount; do
  args=(nope)
  [[ $verb == exec ]] && args=(nope -- true)
  err=$(expect_fail ct $verb "${args[@]}")
  [[ $err == *"no container named 'nope'"* ]] || fail "$verb nope: $err"
  [[ $(code ct $verb "${args[@]}") -eq 3 ]] || fail "$verb nope: exit code not 3"
done

# Limits that make no sense: exit 2, and the container is not touched.
for bad in "--swap -1" "--memory 64M --swap -1" "--memory 1M" "--memory 3M" "--memory 12Q" \
           "--memory 64Mfoo" "--memory abc" "--memory ''" "--swap 64M" "--pids -3" "--pids x" \
           "--net bridge" "--hostname ''"; do
  eval "set -- $bad"
  err=$(expect_fail ct run ok "$@" -- true)
  echo "run $bad: $err"
  [[ $(code ct run ok "$@" -- true) -eq 2 ]] || fail "run $bad: exit code not 2"
  [[ -z $(ct_cgroups ok) ]] || fail "run $bad left a cgroup"
  grep -q "$CTROOT/ok/" /proc/mounts && fail "run $bad left a mount"
done
err=$(expect_fail ct run ok --memory 1M -- true); [[ $err == *"4M minimum"* ]] || fail "1M: $err"
err=$(expect_fail ct run ok --swap -1 -- true); [[ $err == *negative* ]] || fail "-1: $err"
err=$(expect_fail ct run ok --memory 12Q -- true); [[ $err == *suffix* ]] || fail "12Q: $err"

# create: bad names, sizes, sources, duplicates. Nothing left behind.
for bad in "../x" "a/b" "-x" "" "$(printf 'n%.0s' {1..70})"; do
  expect_fail ct create "$bad" >/dev/null
done
err=$(expect_fail ct create small --size 1M); [[ $err == *"16M"* ]] || fail "tiny size: $err"
err=$(expect_fail ct create big --size 5X); [[ $err == *suffix* ]] || fail "size suffix: $err"
err=$(expect_fail ct create nosrc --from /no/such.tar); [[ $err == *"/no/such.tar"* ]] || fail "missing tarball: $err"
err=$(expect_fail ct create ok); [[ $err == *"already exists"* ]] || fail "duplicate: $err"
err=$(expect_fail ct create d --disk zfs); [[ $err == *"ploop, raw or rbd:POOL/NAME"* ]] || fail "--disk: $err"
for n in small big nosrc d; do [[ ! -e $CTROOT/$n ]] || fail "create $n left $CTROOT/$n"; done

# The CLI itself.
expect_fail ct frobnicate >/dev/null
[[ $(code ct frobnicate) -eq 2 ]] || fail "unknown verb: exit code not 2"
expect_fail "$PLOOP_CONTAINER" --root relative/dir list >/dev/null
expect_fail ct run >/dev/null
expect_fail ct exec ok >/dev/null
expect_fail ct stop ok --timeout soon >/dev/null

# Verbs that need a running container say so (exit 2), and do nothing.
for verb in stop freeze thaw; do
  err=$(expect_fail ct $verb ok); [[ $err == *"not running"* ]] || fail "$verb stopped: $err"
done
err=$(expect_fail ct exec ok -- true); [[ $err == *"not running"* ]] || fail "exec stopped: $err"

# A second run of a running container: exit 4, the first one unharmed.
ct start ok -- /bin/sh -c 'while :; do sleep 1; done'
wait_running ok
err=$(expect_fail ct run ok -- true); [[ $err == *"is running"* ]] || fail "second run: $err"
[[ $(code ct run ok -- true) -eq 4 ]] || fail "second run: exit code not 4"
err=$(expect_fail ct destroy ok); [[ $err == *"is running"* ]] || fail "destroy running: $err"
[[ $(ct list | awk '$1 == "ok" {print $2}') == running ]] || fail "first instance disturbed"
# A command that does not exist: 127, like a shell, and a clear line.
ct stop ok --timeout 0
err=$(expect_fail ct run ok -- /no/such/binary); [[ $err == *"/no/such/binary"* ]] || fail "exec error: $err"
[[ $(code ct run ok -- /no/such/binary) -eq 127 ]] || fail "missing binary: exit code not 127"
assert_no_leaks ok
echo PASS
