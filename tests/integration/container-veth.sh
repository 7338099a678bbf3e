#!/usr/bin/env bash
# --net veth: the test makes its own "host" network namespace and runs the
# launcher inside it (nsenter --net: only the network namespace changes).
# A busybox container with --ip/--host-ip/--gateway serves a page with
# httpd; a client in the test's namespace gets it. The settings are kept in
# the config: a plain `start` recreates the network. A second container on
# --bridge talks through a bridge. The host end goes with the container.
# Nothing is made in, or sent to, the machine's own network namespace.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
requires ip
requires nsenter
requires python3

NS=ct-res-h$$
machine_links() { ip -o link show | awk -F': ' '$2 ~ /^ve-/ {print $2}' | sort; }
before=$(machine_links)
ip netns add "$NS" || skip "cannot create a network namespace"
cleanup "ip netns del '$NS'"
ip -n "$NS" link set lo up
inns() { nsenter --net="/var/run/netns/$NS" "$@"; }
cti() { inns "$PLOOP_CONTAINER" --root "$CTROOT" "$@"; }
PORT=21680
# Fetches URL from the test's namespace, retrying while the server starts (bounded).
fetch() {
  local i
  for i in $(seq 50); do
    if inns python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' "$1" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}
serve='mkdir -p /www; echo "page from $(hostname)" > /www/index.html; exec httpd -f -p '$PORT' -h /www'

# Default: still a private lo only.
ct create w --size 128M
[[ $(cti run w -- ls /sys/class/net) == lo ]] || fail "default network is not a private lo"

cti start w --net veth --ip 10.214.0.2/24 --host-ip 10.214.0.1/24 --gateway 10.214.0.1 -- /bin/sh -c "$serve"
wait_running w
page=$(fetch "http://10.214.0.2:$PORT/index.html") || fail "no page from the container: $(cat "$CTROOT/w/console.log")"
[[ $page == "page from w" ]] || fail "page: $page"
# Inside: eth0 with the address, the default route through the gateway.
ct exec w -- ip -4 addr show eth0 | grep -q "inet 10.214.0.2/24" || fail "eth0 has no 10.214.0.2/24"
ct exec w -- cat /proc/net/route | awk '$1 == "eth0" && $2 == "00000000" {print $3}' | grep -qx 0100D60A ||
  fail "no default route via 10.214.0.1: $(ct exec w -- cat /proc/net/route)"
ct exec w -- ping -c1 -W2 10.214.0.1 >/dev/null || fail "container cannot reach the host end"
hostif=$(ip -n "$NS" -o link show | awk -F': ' '$2 ~ /^ve-/ {sub(/@.*/, "", $2); print $2}')
[[ -n $hostif ]] || fail "no host end in the test namespace"
for k in net=veth ip=10.214.0.2/24 host_ip=10.214.0.1/24 gateway=10.214.0.1; do
  grep -qx "$k" "$CTROOT/w/config" || fail "config lacks $k: $(cat "$CTROOT/w/config")"
done
ct stop w --timeout 2
# The host end goes with the container's namespace (the kernel may take a moment).
for i in $(seq 50); do ip -n "$NS" link show "$hostif" >/dev/null 2>&1 || break; sleep 0.1; done
! ip -n "$NS" link show "$hostif" >/dev/null 2>&1 || fail "$hostif left after stop"

# The config recreates the network: a plain start, no flags.
cti start w -- /bin/sh -c "$serve"
wait_running w
[[ $(fetch "http://10.214.0.2:$PORT/index.html") == "page from w" ]] || fail "no page after a plain restart"
ct stop w --timeout 2

# A bridge in the test's namespace, the container's host end on it; the
# network given to `create` is kept the same way.
ip -n "$NS" link add ctbr0 type bridge
ip -n "$NS" addr add 10.214.1.1/24 dev ctbr0
ip -n "$NS" link set ctbr0 up
ct create b --size 128M --net veth --ip 10.214.1.2/24 --bridge ctbr0
cti start b -- /bin/sh -c "$serve"
wait_running b
[[ $(fetch "http://10.214.1.2:$PORT/index.html") == "page from b" ]] || fail "no page through the bridge"
ip -n "$NS" -o link show master ctbr0 | grep -q "ve-" || fail "host end not on ctbr0"
ct stop b --timeout 2

# Bad settings: one line, usage exit code; a missing bridge fails the start cleanly.
for args in "--ip 10.214.0.2" "--net veth --ip 300.1.1.1/24" "--net veth --ip 10.0.0.1/33" \
            "--net veth --gateway 10.214.0.1" "--net veth --ip 10.0.0.2/24 --host-ip 10.0.0.1/24 --bridge x" \
            "--net vxlan" "--net veth --bridge waytoolongname12345"; do
  expect_fail cti run w $args -- true >/dev/null
  rc=0; cti run w $args -- true 2>/dev/null || rc=$?
  [[ $rc -eq 2 ]] || fail "run w $args: exit $rc, want 2"
done
err=$(expect_fail cti run w --net veth --ip 10.214.2.2/24 --bridge nosuchbr -- true)
[[ $err == *"nosuchbr"* ]] || fail "missing bridge: $err"
assert_no_leaks w
assert_no_leaks b
[[ $(ip -n "$NS" -o link show | grep -c "ve-") -eq 0 ]] || sleep 1
[[ $(ip -n "$NS" -o link show | grep -c "ve-") -eq 0 ]] || fail "host ends left: $(ip -n "$NS" -o link show)"
[[ $(machine_links) == "$before" ]] || fail "the machine's own namespace changed: $(diff <(echo "$before") <(machine_links))"
echo PASS
