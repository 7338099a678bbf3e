#!/usr/bin/env bash
# Live migration of a container between two roots on this host over
# loopback (no other migration tool here to compare with): a 1 GiB disk
# with DATA_MB written (default 512) while a steady writer rewrites a few
# MiB with fsync, moved N times (back and forth) online without CRIU,
# online with CRIU (when a working one is installed) and --offline.
# Prints per mode the median rounds, bytes moved, total time and downtime
# (freeze until running on the destination) and the median of each phase
# of the frozen window. BIG=1 adds an 8 GiB sparse disk with BIG_DATA_MB
# (default 1024) written. Reference: `ploop send` of the same disk against
# `qemu-img convert` of its image to raw (both read the same data).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
CT=$BUILD/bin/ploop-container
PLOOP=$BUILD/bin/ploop
N=${N:-3}
PORT=${MIGRATE_BENCH_PORT:-21480}
DATA_MB=${DATA_MB:-512}
[[ $(id -u) -eq 0 ]] || { echo "migrate bench: needs root, skipped"; exit 0; }
[[ -x $CT ]] || { echo "migrate bench: $CT not built"; exit 1; }
have_criu=0
"$TOP/scripts/install-criu.sh" >/dev/null 2>&1 && have_criu=1

TMP=$(mktemp -d /var/tmp/ploop-bench-migrate.XXXXXX)
A=$TMP/a B=$TMP/b
finish() {
  local r
  for r in "$A" "$B"; do
    "$CT" --root "$r" stop bench --timeout 0 >/dev/null 2>&1 || true
    "$CT" --root "$r" destroy bench >/dev/null 2>&1 || true
  done
  [[ -z ${recv_pid:-} ]] || kill "$recv_pid" 2>/dev/null || true
  rm -rf "$TMP"
}
trap finish EXIT

median() { sort -n | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
jget() { python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); v=o
for k in sys.argv[2].split("."): v = v[k]
print(len(v) if isinstance(v, list) else v)' "$1" "$2"; }

WRITER='i=0; while :; do dd if=/dev/urandom of=/hot bs=64k count=8 seek=$(( (i % 16) * 8 )) conv=notrunc,fsync 2>/dev/null; i=$((i+1)); sleep 0.02; done'

# setup SIZE MB: a container "bench" in $A with MB of data, running the writer.
setup() {
  "$CT" --root "$A" create bench --size "$1" >/dev/null
  "$CT" --root "$A" start bench --memory 128M -- /bin/sh -c "$WRITER"
  "$CT" --root "$A" exec bench -- /bin/sh -c "dd if=/dev/urandom of=/data bs=1M count=$2 2>/dev/null; sync /data"
}

# one_run MODE-ARGS...: migrates bench from $from to $to; the --json in $TMP/out.json.
one_run() {
  local i
  for i in $(seq 600); do  # the last destination's merge of the migration's snapshots
    [[ $("$PLOOP" snapshot-list -H -o uuid "$from/bench/disk" | grep -c .) -eq 1 ]] && break
    sleep 0.1
  done
  "$CT" --root "$to" receive --listen "127.0.0.1:$PORT" --once --timeout 60 >"$TMP/recv.out" 2>"$TMP/recv.err" &
  recv_pid=$!
  for i in $(seq 100); do grep -q receiving "$TMP/recv.out" 2>/dev/null && break; sleep 0.05; done
  if ! "$CT" --root "$from" migrate bench "127.0.0.1:$PORT" --json --timeout 60 "$@" >"$TMP/out.json" 2>"$TMP/err"; then
    echo "  migrate failed: $(cat "$TMP/err") / $(cat "$TMP/recv.err")"
    wait "$recv_pid" || true
    recv_pid=
    return 1
  fi
  wait "$recv_pid" || true
  recv_pid=
  local t=$from
  from=$to
  to=$t
}

# bench_size SIZE MB
bench_size() {
  echo "--- disk $1, $2 MiB written, writer rewriting 1 MiB every ~20 ms, $N runs per mode"
  setup "$1" "$2"
  from=$A to=$B
  local modes=("online --no-criu" "offline --offline --timeout 6")
  ((have_criu)) && modes=("online --no-criu" "criu" "offline --offline --timeout 6")
  printf '%-10s %7s %10s %10s %11s   %s\n' mode rounds MiB_moved total_ms downtime_ms "downtime phases (median ms)"
  local m
  for m in "${modes[@]}"; do
    local name=${m%% *} args=()
    [[ $m == *" "* ]] && read -r -a args <<<"${m#* }"
    local rounds=() bytes=() total=() down=() ph=()
    for _ in $(seq "$N"); do
      one_run "${args[@]}" || continue
      rounds+=("$(jget "$TMP/out.json" rounds)") bytes+=("$(jget "$TMP/out.json" bytes_sent)")
      total+=("$(jget "$TMP/out.json" total_ms)") down+=("$(jget "$TMP/out.json" downtime_ms)")
      cp "$TMP/out.json" "$TMP/ph.$name.${#down[@]}.json"
    done
    local phases="" p
    for p in freeze sync snapshot checkpoint last_round send dest_receive prepare dest_attach commit dest_start; do
      local vals
      vals=$(for f in "$TMP"/ph."$name".*.json; do [[ -e $f ]] && jget "$f" "phases_ms.$p"; done | median)
      phases+="$p=$vals "
    done
    # the destination's early attach after round 0 (outside the frozen window)
    phases+="(before the freeze: dest_pre_attach=$(for f in "$TMP"/ph."$name".*.json; do [[ -e $f ]] && jget "$f" dest_pre_attach_ms; done | median))"
    rm -f "$TMP"/ph."$name".*.json
    printf '%-10s %7s %10s %10s %11s   %s\n' "$name" \
      "$(printf '%s\n' "${rounds[@]}" | median)" \
      "$(printf '%s\n' "${bytes[@]}" | median | awk '{printf "%.1f", $1 / 1048576}')" \
      "$(printf '%s\n' "${total[@]}" | median)" "$(printf '%s\n' "${down[@]}" | median)" "$phases"
  done
  # reference: the same disk streamed by `ploop send` vs read by `qemu-img convert`
  local disk=$from/bench/disk img
  "$CT" --root "$from" stop bench --timeout 2 >/dev/null 2>&1 || true
  img=$(ls "$disk"/root.hds 2>/dev/null || true)
  local i
  for i in $(seq 300); do  # the destination's merge of the migration's snapshots
    [[ $("$PLOOP" snapshot-list -H -o uuid "$disk" | grep -c .) -eq 1 ]] && break
    sleep 0.1
  done
  local t0 t1 t2
  t0=$(date +%s%N)
  "$PLOOP" send -o "$TMP/stream" "$disk" >/dev/null 2>&1
  t1=$(date +%s%N)
  if command -v qemu-img >/dev/null && [[ -n $img ]] && [[ $(("$PLOOP" snapshot-list -H -o uuid "$disk" || true) | grep -c .) -eq 1 ]]; then
    qemu-img convert -f parallels -O raw "$img" "$TMP/raw"
    t2=$(date +%s%N)
    printf 'reference: ploop send %.0f ms (%s MiB stream), qemu-img convert to raw %.0f ms\n' \
      "$(((t1 - t0) / 1000000))" "$(($(stat -c %s "$TMP/stream") >> 20))" "$(((t2 - t1) / 1000000))"
  else
    printf 'reference: ploop send %.0f ms (%s MiB stream); qemu-img convert skipped (no qemu-img or not one image)\n' \
      "$(((t1 - t0) / 1000000))" "$(($(stat -c %s "$TMP/stream") >> 20))"
  fi
  rm -f "$TMP/stream" "$TMP/raw"
  "$CT" --root "$from" destroy bench >/dev/null 2>&1 || true
  A=$from B=$to
}

bench_size 1G "$DATA_MB"
[[ ${BIG:-0} == 1 ]] && bench_size 8G "${BIG_DATA_MB:-1024}"
exit 0
