#!/usr/bin/env bash
# The verbs and flags users of runc, Incus and vzctl reach for: --help for
# every verb and --version; exec --env/--user/--cwd; --volume HOST:CT[:ro]
# (read-write, read-only, a single file, no escape through the container
# path); exit codes by class (2 usage, 3 no such container, 4 busy/exists/
# frozen, 5 not running); stop says when it escalates to SIGKILL.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
code() { local rc=0; "$@" >/dev/null 2>&1 || rc=$?; echo $rc; }

# Help and version.
for verb in create run start exec stop list freeze thaw snapshot mount umount destroy update; do
  out=$(ct "$verb" --help) || fail "$verb --help failed"
  [[ $out == "usage: $verb"* || $out == *"usage: $verb "* ]] || fail "$verb --help: $out"
done
ct run --help | grep -q -- "--io-limit" || fail "run --help does not list --io-limit"
[[ $(ct --version) =~ ^ploop-container\ [0-9]+\.[0-9]+ ]] || fail "--version: $(ct --version)"
ct --help | grep -q "5 container not running" || fail "--help does not list exit code 5"

# Exit codes by class.
ct create e --size 128M
[[ $(code ct create e) -eq 4 ]] || fail "create of an existing container: not 4"
[[ $(code ct exec e -- true) -eq 5 ]] || fail "exec in a stopped container: not 5"
[[ $(code ct stop e) -eq 5 ]] || fail "stop of a stopped container: not 5"
[[ $(code ct freeze e) -eq 5 ]] || fail "freeze of a stopped container: not 5"
[[ $(code ct umount e) -eq 5 ]] || fail "umount of an unmounted disk: not 5"
[[ $(code ct exec nosuch -- true) -eq 3 ]] || fail "exec in a missing container: not 3"
[[ $(code ct run e --bogus) -eq 2 ]] || fail "bad flag: not 2"

# A PID 1 that ignores SIGTERM: stop waits, says it escalates, then kills.
ct start e -- /bin/sh -c 'trap "" TERM; while :; do sleep 1; done'
wait_running e
[[ $(code ct start e) -eq 4 ]] || fail "second start: not 4"
ct freeze e
[[ $(code ct exec e -- true) -eq 4 ]] || fail "exec in a frozen container: not 4"
ct thaw e

# exec --env/--user/--cwd, options before or after NAME.
out=$(ct exec e --env FOO=bar --env PATH=/bin:/usr/bin --user 1000:1001 --cwd /tmp -- \
  /bin/sh -c 'echo "$FOO $PATH"; id -u; id -g; pwd; grep CapEff /proc/self/status')
echo "$out"
[[ $(sed -n 1p <<<"$out") == "bar /bin:/usr/bin" ]] || fail "--env: $out"
[[ $(sed -n 2p <<<"$out") == 1000 && $(sed -n 3p <<<"$out") == 1001 ]] || fail "--user 1000:1001: $out"
[[ $(sed -n 4p <<<"$out") == /tmp ]] || fail "--cwd /tmp: $out"
grep -q "CapEff:[[:space:]]*0000000000000000" <<<"$out" || fail "a non-root exec kept capabilities"
[[ $(ct exec --user 7 e id -u) == 7 ]] || fail "--user before NAME"
[[ $(ct exec e -- id -u) == 0 ]] || fail "default exec user is not root"
for bad in "--user abc" "--user 1:x" "--env NOEQUALS" "--env =v" "--cwd relative" "--frob"; do
  err=$(expect_fail ct exec e $bad -- true)
  [[ $(code ct exec e $bad -- true) -eq 2 ]] || fail "exec $bad: not 2 ($err)"
done
rc=0; err=$(ct exec e --cwd /no/such -- true 2>&1) || rc=$?
[[ $rc -eq 127 && $err == *"/no/such"* ]] || fail "--cwd /no/such: rc $rc: $err"

t0=$(date +%s)
err=$(ct stop e --timeout 1 2>&1)
(( $(date +%s) - t0 <= 10 )) || fail "stop took too long"
[[ $err == *"still running 1 s after SIGTERM: sending SIGKILL"* ]] || fail "stop did not say it escalates: '$err'"
[[ $(ct list | awk '$1 == "e" {print $2}') == stopped ]] || fail "not stopped after stop"
# A clean stop says nothing.
ct start e -- /bin/sh -c 'trap "exit 0" TERM; while :; do sleep 0.1; done'
wait_running e
err=$(ct stop e --timeout 5 2>&1)
[[ -z $err ]] || fail "a clean stop printed: $err"

# Volumes.
mkdir -p "$TMP/vol"
echo hostdata > "$TMP/vol/f"
echo conf > "$TMP/single"
out=$(ct run e --volume "$TMP/vol:/data" --volume "$TMP/vol:/ro:ro" --volume "$TMP/single:/etc/app/single.conf:ro" -- \
  /bin/sh -c 'cat /data/f; echo fromct > /data/g; echo x > /ro/h 2>/dev/null && echo ro=written || echo ro=refused
              cat /etc/app/single.conf; echo y >> /etc/app/single.conf 2>/dev/null && echo file=written || echo file=refused')
echo "$out"
[[ $(sed -n 1p <<<"$out") == hostdata ]] || fail "volume content not visible"
[[ $(cat "$TMP/vol/g") == fromct ]] || fail "write to a rw volume did not reach the host"
grep -qx ro=refused <<<"$out" || fail ":ro volume took a write"
[[ ! -e $TMP/vol/h ]] || fail ":ro volume wrote to the host"
grep -qx conf <<<"$out" && grep -qx file=refused <<<"$out" || fail "single-file :ro volume: $out"
[[ $(cat "$TMP/single") == conf ]] || fail "the host file changed"
# A symlink in the container cannot send the target out to the host.
ct run e -- /bin/sh -c "ln -s '$TMP' /escape"
ct run e --volume "$TMP/vol:/escape/planted" -- true || true
[[ ! -e $TMP/planted ]] || fail "a container symlink redirected a volume onto the host"
for bad in "relative:/x" "$TMP/vol:relative" "$TMP/vol:/" "$TMP/vol:/a/../b" "$TMP/vol:/x:rx" "/no/such:/x" "$TMP/vol"; do
  err=$(expect_fail ct run e --volume "$bad" -- true)
  [[ $(code ct run e --volume "$bad" -- true) -eq 2 ]] || fail "--volume $bad: not 2 ($err)"
done
assert_no_leaks e
echo PASS
