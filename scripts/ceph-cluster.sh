#!/usr/bin/env bash
# A throwaway Ceph cluster on 127.0.0.1 for tests and benchmarks: one mon and
# N memstore OSDs (default 2), one pool of size min(N,2), everything under DIR.
#
#   scripts/ceph-cluster.sh start DIR [--osds N] [--pool NAME] [--osd-bytes B] [--port P [--ports N]]
#   scripts/ceph-cluster.sh stop DIR          # daemons by the pids in their pid files
#   scripts/ceph-cluster.sh kill-osd DIR ID   # SIGKILL one OSD (fault tests)
#   scripts/ceph-cluster.sh start-osd DIR ID  # bring it back
#
# After start, DIR/ceph.conf is the cluster's configuration (CEPH_CONF=DIR/ceph.conf).
# Memstore keeps data in the OSDs' memory: with one OSD a kill loses everything,
# so fault tests use two OSDs and pool size 2. Ports come from a range derived
# from DIR's path so that two clusters on one machine do not collide.
set -euo pipefail

die() { echo "ceph-cluster: $*" >&2; exit 1; }
cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || die "usage: $0 start|stop|kill-osd|start-osd DIR [...]"
shift 2

pidfiles() { ls "$dir"/run/*.pid 2>/dev/null || true; }
stop_daemons() {
  local f pid i
  for f in $(pidfiles); do
    pid=$(cat "$f" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
  done
  for i in $(seq 50); do
    local alive=0
    for f in $(pidfiles); do
      pid=$(cat "$f" 2>/dev/null) || continue
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.1
  done
  for f in $(pidfiles); do
    pid=$(cat "$f" 2>/dev/null) || continue
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

osd_pid() { cat "$dir/run/osd.$1.pid" 2>/dev/null; }
start_osd() {
  ceph-osd -c "$dir/ceph.conf" -i "$1" >>"$dir/log/osd.$1.out" 2>&1 ||
    die "osd.$1 did not start (see $dir/log/osd.$1.out)"
}

case $cmd in
stop)
  [[ -d $dir ]] || exit 0
  stop_daemons
  exit 0
  ;;
kill-osd)
  pid=$(osd_pid "$1") || die "no pid file for osd.$1"
  kill -KILL "$pid"
  rm -f "$dir/run/osd.$1.pid"
  exit 0
  ;;
start-osd)
  start_osd "$1"
  exit 0
  ;;
start) ;;
*) die "unknown command '$cmd'" ;;
esac

osds=2 pool=rbd osd_bytes=$((1 << 30)) port= ports=20
while (($#)); do
  case $1 in
  --osds) osds=$2; shift 2 ;;
  --pool) pool=$2; shift 2 ;;
  --osd-bytes) osd_bytes=$2; shift 2 ;;
  --port) port=$2; shift 2 ;;
  --ports) ports=$2; shift 2 ;;
  *) die "unknown option '$1'" ;;
  esac
done
for b in ceph-mon ceph-osd ceph rbd; do
  command -v $b >/dev/null || die "$b not installed (scripts/install-deps.sh installs it)"
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
[[ -e $dir/ceph.conf ]] && die "$dir already holds a cluster (stop it and remove the directory first)"
mkdir -p "$dir/run" "$dir/log" "$dir/mon"

# A port block of 20 in 40000-59999, chosen by the directory's path.
# --port P: the block P..P+19 instead (a test's own port range); --ports N
# makes it P..P+N-1 (an OSD binds 8 ports, the mon 2).
base=$((40000 + ($(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 1000) * 20))
[[ -n $port ]] && base=$port
size=$((osds < 2 ? osds : 2))
fsid=$(uuidgen)
cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$base,v1:127.0.0.1:$((base + 1))]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
ms bind port min = $((base + 2))
ms bind port max = $((base + ports - 1))
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = $size
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
osd crush chooseleaf type = 0
osd pool default pg autoscale mode = off
osd pool default pg num = 8
osd pool default pgp num = 8
paxos propose interval = 0.05
run dir = $dir/run
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
admin socket = $dir/run/\$name.asok
mon data = $dir/mon/\$name
osd data = $dir/osd/\$name
osd objectstore = memstore
memstore device bytes = $osd_bytes
osd fast shutdown = false
mon osd full ratio = 0.95
mon osd nearfull ratio = 0.85
mon osd backfillfull ratio = 0.90
osd heartbeat grace = 4
osd heartbeat interval = 1
mon osd down out interval = 0
[client]
admin socket =
log file = $dir/log/client.log
rbd cache = false
EOF
export CEPH_CONF=$dir/ceph.conf
trap 'stop_daemons' ERR
monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$base,v1:127.0.0.1:$((base + 1))]" "$dir/monmap" >"$dir/log/mkfs.out" 2>&1 ||
  die "monmaptool failed (see $dir/log/mkfs.out)"
ceph-mon -c "$CEPH_CONF" --mkfs -i a --monmap "$dir/monmap" >>"$dir/log/mkfs.out" 2>&1 ||
  die "ceph-mon --mkfs failed (see $dir/log/mkfs.out)"
ceph-mon -c "$CEPH_CONF" -i a >>"$dir/log/mon.out" 2>&1 || die "ceph-mon did not start"
for ((i = 0; i < osds; i++)); do
  id=$(timeout 20 ceph osd create) || die "ceph osd create timed out"
  mkdir -p "$dir/osd/osd.$id"
  ceph-osd -c "$CEPH_CONF" -i "$id" --mkfs >>"$dir/log/mkfs.out" 2>&1 || die "ceph-osd --mkfs failed"
  start_osd "$id"
done
timeout 20 ceph osd pool create "$pool" 8 8 >/dev/null 2>&1 || die "pool create timed out"
timeout 20 ceph osd pool set "$pool" size "$size" --yes-i-really-mean-it >/dev/null 2>&1 || true
timeout 20 rbd pool init "$pool" || die "rbd pool init failed"
# Ready when an object can be written and read back.
for i in $(seq 100); do
  if timeout 2 rados -p "$pool" put ready-probe /dev/null 2>/dev/null; then
    timeout 2 rados -p "$pool" rm ready-probe 2>/dev/null || true
    echo "$dir/ceph.conf"
    exit 0
  fi
  sleep 0.1
done
die "cluster did not become writable in 10 s"
