# Shared by the rbd-*.sh tests (sourced after functions.sh): a throwaway
# Ceph cluster on 127.0.0.1 (scripts/ceph-cluster.sh), stopped at exit.
# Ports: the test's block of 20 (RBD_PORT) for the cluster; NBD ports given
# by each test (all in 21700-21799).
for t in ceph-mon ceph-osd ceph rbd rados qemu-img qemu-io; do requires $t; done
requires_root
# rbd_cluster_start [OSDS]: sets CONF; every client call below has a timeout.
rbd_cluster_start() {
  local osds=${1:-1}
  CEPH_DIR=$TMP/ceph
  cleanup "'$TOP/scripts/ceph-cluster.sh' stop '$CEPH_DIR'"
  CONF=$(timeout 120 "$TOP/scripts/ceph-cluster.sh" start "$CEPH_DIR" --osds "$osds" --port "$RBD_PORT" \
    --osd-bytes $((384 << 20))) || fail "ceph cluster did not start"
  export CEPH_CONF=$CONF
}
# t CMD...: CMD with a time limit (a client of a cluster whose PGs are
# inactive hangs instead of failing).
t() { timeout 120 "$@"; }
# serve NAME PORT DISK: ploop-nbd in the background, stopped at exit.
serve() {
  local pidf=$TMP/nbd-$1.pid
  t "$PLOOP_NBD" -p "$2" -d -P "$pidf" "$1=$3" || fail "ploop-nbd $3 did not start"
  cleanup "kill \$(cat '$pidf') 2>/dev/null; sleep 0.5"
}
unserve() {
  local pidf=$TMP/nbd-$1.pid pid
  pid=$(cat "$pidf")
  kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  fail "ploop-nbd $1 did not stop"
}
