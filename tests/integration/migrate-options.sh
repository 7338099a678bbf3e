#!/usr/bin/env bash
# A migrated run keeps every option it was started with: --init, CPU
# limits, dropped capabilities, the read-only root, a volume and a veth
# network are all in force at the destination after a restart (--no-criu),
# as they were at the source. A peer's run arguments are checked like the
# command line: a bad value is refused before anything is made.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"

mkdir -p "$TMP/vol"
echo "volume data" >"$TMP/vol/f"
src create opt --size 64M >/dev/null
src start opt --memory 64M --init --cpus 0.5 --cap-drop ALL --read-only \
  --volume "$TMP/vol:/mnt/vol:ro" --net veth --ip 192.168.213.2/24 --host-ip 192.168.213.1/24 \
  -- /bin/sh -c 'while :; do sleep 1; done'

# in_force SIDE ROOT: the options hold for the container there
in_force() {
  local side=$1 root=$2 pc="$PLOOP_CONTAINER --root $2"
  $pc exec opt -- ps -o pid,comm | grep -Eq '^ *1 ploop-init' || fail "$side: PID 1 is not the init"
  [[ $($pc exec opt -- cat /mnt/vol/f) == "volume data" ]] || fail "$side: the volume is missing"
  ! $pc exec opt -- touch /x 2>/dev/null || fail "$side: the root is writable"
  ! $pc exec opt -- touch /mnt/vol/x 2>/dev/null || fail "$side: the volume is writable"
  local bnd
  bnd=$($pc exec opt -- cat /proc/1/status | awk '/^CapBnd/ {print $2}')
  [[ $bnd == 0000000000000000 ]] || fail "$side: PID 1 keeps capabilities (CapBnd $bnd)"
  $pc exec opt -- ip addr show eth0 | grep -q 'inet 192.168.213.2/24' || fail "$side: eth0 has no 192.168.213.2"
  grep -qx 'cpus=0.500' "$root/opt/state" || fail "$side: the CPU limit is not in force: $(cat "$root/opt/state")"
  echo "ok: options in force at the $side"
}
in_force source "$SRC"

start_receiver
migrate opt --no-criu >"$TMP/out" 2>&1 || fail "migrate failed: $(cat "$TMP/out")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
[[ ! -e $SRC/opt ]] || fail "the source kept opt"
# the receiver ran in the destination's namespace: so does the container's host end
[[ $(state_of "$DST" opt) == running ]] || fail "opt does not run at the destination"
in_b ip addr | grep -q 'inet 192.168.213.1/24' || fail "the destination host has no 192.168.213.1"
in_force destination "$DST"
dst stop opt --timeout 1 >/dev/null
dst destroy opt

# a stopped container: what create and update saved in its config (veth
# network, limits) arrives, and its next start at the destination uses it
src create cfg --size 64M --net veth --ip 192.168.214.2/24 --host-ip 192.168.214.1/24 >/dev/null
src update cfg --cpus 0.25 --memory 96M >/dev/null
start_receiver
migrate cfg >"$TMP/out" 2>&1 || fail "cold migrate failed: $(cat "$TMP/out")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
for kv in net=veth ip=192.168.214.2/24 host_ip=192.168.214.1/24 cpus=0.250 memory=$((96 << 20)); do
  grep -qx "$kv" "$DST/cfg/config" || fail "the destination's config lacks $kv: $(cat "$DST/cfg/config")"
done
in_b "$PLOOP_CONTAINER" --root "$DST" start cfg -- /bin/sh -c 'while :; do sleep 1; done'
dst exec cfg -- ip addr show eth0 | grep -q 'inet 192.168.214.2/24' || fail "cfg's next start has no veth address"
grep -qx 'cpus=0.250' "$DST/cfg/state" || fail "cfg's next start lacks the CPU limit"
dst stop cfg --timeout 1 >/dev/null
dst destroy cfg
echo "ok: config travels"

# run arguments that do not parse (a damaged run-args file here; a peer's
# HELLO goes through the same checks there): one line, nothing moves
src create bad --size 64M >/dev/null
src start bad -- /bin/sh -c 'while :; do sleep 1; done'
for i in $(seq 50); do [[ -s $SRC/bad/run-args ]] && break; sleep 0.1; done
cp "$SRC/bad/run-args" "$TMP/run-args.good"
start_receiver
for damage in 'cpus=lots' 'cap_drop=0x1ffffffffffffffff' 'volumes=99' 'net=bogus'; do
  { grep -v "^${damage%%=*}=" "$TMP/run-args.good"; echo "$damage"; } >"$SRC/bad/run-args"
  err=$(expect_fail migrate bad --no-criu)
  echo "$damage: $err"
  [[ $(grep -c . <<<"$err") -eq 1 ]] || fail "$damage: not one line: $err"
  [[ $err == *"${damage%%=*}"* ]] || fail "$damage: the error does not name it: $err"
  [[ $(state_of "$SRC" bad) == running ]] || fail "$damage: bad is $(state_of "$SRC" bad) at the source"
  [[ ! -e $DST/bad ]] || fail "$damage: the destination made bad"
done
kill -9 "$RECV_PID"
echo "ok: damaged run arguments refused"
