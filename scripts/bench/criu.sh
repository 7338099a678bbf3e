#!/usr/bin/env bash
# Process checkpoint/restore with CRIU: a busybox container holding 64 MiB
# resident (a shell variable) plus a writer loop, checkpointed (processes
# end) and restored N times, images on tmpfs. Prints the median wall time
# of `criu dump` and `criu restore` as ploop-container runs them, their CPU
# time, and the whole verbs, restoring with a full copy of memory and
# post-copy (--lazy-pages); against the 300 ms downtime target of
# `migrate` with CRIU (dump + restore, before any transfer).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
CT=$BUILD/bin/ploop-container
N=${N:-5}
[[ $(id -u) -eq 0 ]] || { echo "criu bench: needs root, skipped"; exit 0; }
[[ -x $CT ]] || { echo "criu bench: $CT not built"; exit 1; }
"$TOP/scripts/install-criu.sh" >/dev/null || { echo "criu bench: no working CRIU (scripts/install-criu.sh)"; exit 1; }

TMP=$(mktemp -d /var/tmp/ploop-bench-criu.XXXXXX)
IMG=$(mktemp -d /dev/shm/ploop-bench-criu.XXXXXX)
R=$TMP/ct
finish() {
  "$CT" --root "$R" stop bench --timeout 0 >/dev/null 2>&1 || true
  "$CT" --root "$R" destroy bench >/dev/null 2>&1 || true
  rm -rf "$TMP" "$IMG"
}
trap finish EXIT

"$CT" --root "$R" create bench --size 256M >/dev/null
"$CT" --root "$R" start bench -- /bin/sh -c '
  sh -c "x=\$(head -c 67108864 /dev/zero | tr \"\\\\0\" a); echo ready > /tmp/held; while :; do sleep 1; done" &
  i=0; while :; do i=$((i+1)); echo $i >> /root/log; sleep 0.05; done'
for _ in $(seq 300); do
  "$CT" --root "$R" exec bench -- cat /tmp/held >/dev/null 2>&1 && break
  sleep 0.1
done
rss=$("$CT" --root "$R" exec bench -- sh -c 'cat /proc/[0-9]*/status 2>/dev/null; true' | awk '/^VmRSS/ && $2 > m {m = $2} END {printf "%d MiB", m / 1024}')

field() { sed -n "s/.* $1=\([0-9.]*\)ms.*/\1/p" <<<"$2"; }
dump=() dcpu=() dtot=() rest=() rtot=() lazy=() ltot=()
for i in $(seq "$N"); do
  for mode in copy lazy; do
    rm -rf "${IMG:?}"/*
    d=$(PLOOP_CONTAINER_TIMING=1 "$CT" --root "$R" checkpoint bench "$IMG" 2>&1)
    dump+=("$(field criu "$d")") dcpu+=("$(field criu_cpu "$d")") dtot+=("$(field total "$d")")
    if [[ $mode == copy ]]; then
      r=$(PLOOP_CONTAINER_TIMING=1 "$CT" --root "$R" restore bench "$IMG" 2>&1)
      rest+=("$(field criu "$r")") rtot+=("$(field total "$r")")
    else
      r=$(PLOOP_CONTAINER_TIMING=1 "$CT" --root "$R" restore bench "$IMG" --lazy-pages 2>&1)
      lazy+=("$(field criu "$r")") ltot+=("$(field total "$r")")
    fi
  done
done
size=$(du -sm "$IMG" | cut -f1)
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
md=$(median "${dump[@]}") mdc=$(median "${dcpu[@]}") mdt=$(median "${dtot[@]}")
mr=$(median "${rest[@]}") mrt=$(median "${rtot[@]}")
ml=$(median "${lazy[@]}") mlt=$(median "${ltot[@]}")
echo "criu bench: $N rounds, largest RSS ${rss}, images ${size} MiB on tmpfs, load $(cut -d' ' -f1 /proc/loadavg)"
printf '  %-34s %10s\n' "what (median)" "ms"
printf '  %-34s %10s\n' "criu dump (frozen -> images)" "$md"
printf '  %-34s %10s\n' "  its CPU time" "$mdc"
printf '  %-34s %10s\n' "checkpoint verb (incl. cleanup)" "$mdt"
printf '  %-34s %10s\n' "criu restore (images -> running)" "$mr"
printf '  %-34s %10s\n' "restore verb (mount, cgroups, criu)" "$mrt"
printf '  %-34s %10s\n' "criu restore --lazy-pages" "$ml"
printf '  %-34s %10s\n' "restore verb --lazy-pages" "$mlt"
awk -v d="$md" -v r="$mr" -v l="$ml" 'BEGIN { printf "  dump + restore = %.0f ms, with --lazy-pages %.0f ms (migrate target with CRIU: < 300 ms downtime, transfer included)\n", d + r, d + l }'
