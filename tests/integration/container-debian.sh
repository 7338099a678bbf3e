#!/usr/bin/env bash
# A real distribution in a container: a Debian minbase rootfs made by
# debootstrap from the host's own apt sources (scripts/debian-rootfs.sh,
# cached as a tarball under /var/tmp/ploop-test-cache/, so only the first
# run takes minutes), with python3. It serves `python3 -m http.server` on a
# --net veth network inside a network namespace this test makes (the
# launcher runs in it, as in container-veth.sh); a client there gets a page.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
requires ip
requires nsenter
requires python3

CACHE=${PLOOP_TEST_CACHE:-/var/tmp/ploop-test-cache}/debian-minbase-python3.tar.gz
if [[ ! -s $CACHE ]]; then
  command -v debootstrap >/dev/null || skip "debootstrap not installed and no cached rootfs ($CACHE)"
  "$(dirname "$0")/../../scripts/debian-rootfs.sh" "$CACHE" python3-minimal,libpython3-stdlib ||
    skip "could not build the Debian rootfs (no archive reachable?)"
fi

NS=ct-deb-h$$
ip netns add "$NS" || skip "cannot create a network namespace"
cleanup "ip netns del '$NS'"
ip -n "$NS" link set lo up
inns() { nsenter --net="/var/run/netns/$NS" "$@"; }
cti() { inns "$PLOOP_CONTAINER" --root "$CTROOT" "$@"; }
PORT=21690

ct create deb --size 1G --from "$CACHE"
[[ $(ct run deb -- cat /etc/debian_version) =~ ^[0-9]+ ]] || fail "no /etc/debian_version in the container"
[[ $(ct run deb -- /usr/bin/python3 -c 'print(6 * 7)') == 42 ]] || fail "python3 does not run"

cti start deb --net veth --ip 10.214.5.2/24 --host-ip 10.214.5.1/24 -- \
  /bin/sh -c "mkdir -p /srv && echo \"debian page from \$(hostname)\" > /srv/index.html && exec python3 -m http.server $PORT --bind 10.214.5.2 --directory /srv"
wait_running deb
page=""
for i in $(seq 100); do  # python's start takes a moment, more on a loaded host
  page=$(inns python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
    "http://10.214.5.2:$PORT/index.html" 2>/dev/null) && break
  sleep 0.2
done
[[ $page == "debian page from deb" ]] || fail "no page from the Debian container: '$page' ($(tail -5 "$CTROOT/deb/console.log"))"
ct logs deb | grep -q "GET /index.html" || fail "the server's log lacks the request: $(ct logs deb)"
ct stop deb --timeout 5
assert_no_leaks deb
[[ $(ip -n "$NS" -o link show | grep -c "ve-") -eq 0 ]] || sleep 1
[[ $(ip -n "$NS" -o link show | grep -c "ve-") -eq 0 ]] || fail "host end left: $(ip -n "$NS" -o link show)"
echo PASS
