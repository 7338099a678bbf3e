#!/usr/bin/env bash
# Live migration of a container between two roots on this host over
# loopback (no other migration tool here to compare with): a 1 GiB and an
# 8 GiB container, each with the same DATA_MB written (default 512) and a
# steady writer rewriting 512 KiB of an 8 MiB file with fsync every ~20 ms
# during the rounds, moved back and forth, the two taking turns (1G, 8G, 1G, 8G...) so that
# the host's mood hits both alike, N times each (default 3) in every mode:
# online without CRIU, online with CRIU (when a working one is installed)
# and --offline. Prints per mode and size the medians of rounds, bytes
# moved, total time, downtime (freeze until running on the destination),
# where the total went (hello, rounds, finish) and the frozen window's
# phases; then each target as met or MISSED: downtime < 150 ms without
# CRIU and < 300 ms with it, the 1G and 8G totals within 20% of each other,
# bytes moved <= 1.3x the data written. Reference: `ploop send` of the 1G
# disk against `qemu-img convert` of its image to raw (the same data).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
CT=$BUILD/bin/ploop-container
PLOOP=$BUILD/bin/ploop
N=${N:-3}
PORT=${MIGRATE_BENCH_PORT:-21480}
DATA_MB=${DATA_MB:-512}
SIZES=(1G 8G)
[[ $(id -u) -eq 0 ]] || { echo "migrate bench: needs root, skipped"; exit 0; }
[[ -x $CT ]] || { echo "migrate bench: $CT not built"; exit 1; }
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
trap bench_cleanup EXIT
have_criu=0
"$TOP/scripts/install-criu.sh" >/dev/null 2>&1 && have_criu=1

TMP=$(mktemp -d /var/tmp/ploop-bench-migrate.XXXXXX)
undo+=("rm -rf $TMP")
A=$TMP/a B=$TMP/b
recv_pid=

median() { sort -n | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# jget FILE KEY: a value of the --json (a list: its length; KEY.sum: its sum)
jget() { python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); v=o
for k in sys.argv[2].split("."):
    v = sum(v) if k == "sum" else v[k]
print(len(v) if isinstance(v, list) else round(v, 1) if isinstance(v, float) else v)' "$1" "$2"; }

WRITER='i=0; while :; do dd if=/dev/urandom of=/hot bs=64k count=8 seek=$(( (i % 16) * 8 )) conv=notrunc,fsync 2>/dev/null; i=$((i+1)); sleep 0.02; done'

# setup NAME SIZE: a container NAME in $A with $DATA_MB MiB of data, running the writer.
declare -A from to
setup() {
  local r
  for r in "$A" "$B"; do
    undo+=("$CT --root $r destroy $1" "$CT --root $r stop $1 --timeout 0")
  done
  "$CT" --root "$A" create "$1" --size "$2" >/dev/null
  "$CT" --root "$A" start "$1" --memory 128M -- /bin/sh -c "$WRITER"
  "$CT" --root "$A" exec "$1" -- /bin/sh -c "dd if=/dev/urandom of=/data bs=1M count=$DATA_MB 2>/dev/null; sync /data"
  from[$1]=$A to[$1]=$B
}

# one_run NAME MODE-ARGS...: migrates NAME from its root to the other; the --json in $TMP/out.json.
one_run() {
  local name=$1
  shift
  for _ in $(seq 600); do  # the last destination's merge of the migration's snapshots
    [[ $("$PLOOP" snapshot-list -H -o uuid "${from[$name]}/$name/disk" | grep -c .) -eq 1 ]] && break
    sleep 0.1
  done
  "$CT" --root "${to[$name]}" receive --listen "127.0.0.1:$PORT" --once --timeout 60 >"$TMP/recv.out" 2>"$TMP/recv.err" &
  recv_pid=$!
  for _ in $(seq 100); do grep -q receiving "$TMP/recv.out" 2>/dev/null && break; sleep 0.05; done
  if ! "$CT" --root "${from[$name]}" migrate "$name" "127.0.0.1:$PORT" --json --timeout 60 "$@" >"$TMP/out.json" 2>"$TMP/err"; then
    echo "  $name: migrate failed: $(cat "$TMP/err") / $(cat "$TMP/recv.err")"
    wait "$recv_pid" || true
    recv_pid=
    return 1
  fi
  wait "$recv_pid" || true
  recv_pid=
  local t=${from[$name]}
  from[$name]=${to[$name]}
  to[$name]=$t
}

# of MODE SIZE KEY: the median of KEY over the runs of MODE on the SIZE container
of() { for f in "$TMP"/res."$1"."$2".*.json; do if [[ -e $f ]]; then jget "$f" "$3"; fi; done | median; }

echo "--- disks ${SIZES[*]}, $DATA_MB MiB written to each, writer rewriting 512 KiB with fsync every ~20 ms, $N runs per mode and size, taking turns"
echo "load before: $(uptime)"
for s in "${SIZES[@]}"; do setup "bench$s" "$s"; done
undo+=('[[ -z $recv_pid ]] || kill "$recv_pid"')  # first: a receiver holds what it receives
modes=("online --no-criu" "offline --offline --timeout 6")
((have_criu)) && modes=("online --no-criu" "criu" "offline --offline --timeout 6")
printf '%-8s %-4s %6s %9s %9s %10s %8s %9s %9s   %s\n' mode size rounds MiB_moved total_ms downtime_ms hello_ms rounds_ms finish_ms \
  "downtime phases (median ms)"
for m in "${modes[@]}"; do
  mode=${m%% *} args=()
  [[ $m == *" "* ]] && read -r -a args <<<"${m#* }"
  for run in $(seq "$N"); do
    for s in "${SIZES[@]}"; do
      one_run "bench$s" "${args[@]}" && cp "$TMP/out.json" "$TMP/res.$mode.$s.$run.json"
    done
  done
  for s in "${SIZES[@]}"; do
    phases=""
    for p in freeze sync snapshot checkpoint last_round prepare dest_attach commit dest_start; do
      phases+="$p=$(of "$mode" "$s" "phases_ms.$p") "
    done
    printf '%-8s %-4s %6s %9s %9s %10s %8s %9s %9s   %s\n' "$mode" "$s" "$(of "$mode" "$s" rounds)" \
      "$(of "$mode" "$s" bytes_sent | awk '{printf "%.1f", $1 / 1048576}')" "$(of "$mode" "$s" total_ms)" \
      "$(of "$mode" "$s" downtime_ms)" "$(of "$mode" "$s" hello_ms)" "$(of "$mode" "$s" round_ms.sum)" \
      "$(of "$mode" "$s" finish_ms)" "$phases"
  done
done
echo "load after: $(uptime)"

# The targets, on the medians.
verdict() { if awk "BEGIN {exit !($1)}"; then echo met; else echo MISSED; fi; }
echo "targets (medians of $N):"
for m in "${modes[@]}"; do
  mode=${m%% *}
  d1=$(of "$mode" 1G downtime_ms) d8=$(of "$mode" 8G downtime_ms)
  t1=$(of "$mode" 1G total_ms) t8=$(of "$mode" 8G total_ms)
  b1=$(of "$mode" 1G bytes_sent) b8=$(of "$mode" 8G bytes_sent)
  if [[ $d1 == - || $d8 == - ]]; then
    echo "  $mode: no successful run of one size: MISSED"
    continue
  fi
  case $mode in
  online) lim=150 ;;
  criu) lim=300 ;;
  *) lim= ;;
  esac
  [[ -z $lim ]] ||
    echo "  $mode: downtime < $lim ms: 1G $d1 ms, 8G $d8 ms: $(verdict "$d1 < $lim && $d8 < $lim")"
  echo "  $mode: 1G and 8G totals within 20%: $t1 / $t8 ms ($(awk "BEGIN {printf \"%+.1f%%\", ($t8 / $t1 - 1) * 100}")): $(verdict "$t8 <= $t1 * 1.2 && $t1 <= $t8 * 1.2")"
  r1=$(awk "BEGIN {printf \"%.2f\", $b1 / ($DATA_MB * 1048576)}") r8=$(awk "BEGIN {printf \"%.2f\", $b8 / ($DATA_MB * 1048576)}")
  echo "  $mode: bytes moved <= 1.3x the data: 1G ${r1}x, 8G ${r8}x: $(verdict "$r1 <= 1.3 && $r8 <= 1.3")"
done

# reference: the 1G disk streamed by `ploop send` vs read by `qemu-img convert`
name=bench1G
disk=${from[$name]}/$name/disk
"$CT" --root "${from[$name]}" stop "$name" --timeout 2 >/dev/null 2>&1 || true
for _ in $(seq 300); do  # the destination's merge of the migration's snapshots
  [[ $("$PLOOP" snapshot-list -H -o uuid "$disk" | grep -c .) -eq 1 ]] && break
  sleep 0.1
done
t0=$(date +%s%N)
"$PLOOP" send -o "$TMP/stream" "$disk" >/dev/null 2>&1
t1=$(date +%s%N)
if command -v qemu-img >/dev/null && [[ -e $disk/root.hds ]] && [[ $("$PLOOP" snapshot-list -H -o uuid "$disk" | grep -c .) -eq 1 ]]; then
  qemu-img convert -f parallels -O raw "$disk/root.hds" "$TMP/raw"
  t2=$(date +%s%N)
  printf 'reference (1G disk): ploop send %d ms (%d MiB stream), qemu-img convert to raw %d ms\n' \
    "$(((t1 - t0) / 1000000))" "$(($(stat -c %s "$TMP/stream") >> 20))" "$(((t2 - t1) / 1000000))"
else
  printf 'reference (1G disk): ploop send %d ms (%d MiB stream); qemu-img convert skipped (no qemu-img or not one image)\n' \
    "$(((t1 - t0) / 1000000))" "$(($(stat -c %s "$TMP/stream") >> 20))"
fi
exit 0
