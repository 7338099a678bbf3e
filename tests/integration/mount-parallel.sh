#!/usr/bin/env bash
# Several disks attached and mounted at once (parallel `ploop mount`s race
# for loop devices and the state directory), each with its own daemon,
# device and data; parallel umounts leave nothing behind.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/mount-common.inc"

N=3
for i in $(seq $N); do new_disk "$TMP/d$i" 128M & done
wait
for i in $(seq $N); do mkdir -p "$TMP/m$i"; done
pids=()
for i in $(seq $N); do att_mount "$TMP/d$i" "$TMP/m$i" >"$TMP/dev$i" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a parallel mount failed"; done
devs=$(cat "$TMP"/dev? | sort -u | wc -l)
[[ $devs -eq $N ]] || fail "$N disks got $devs distinct devices"
for i in $(seq $N); do
  head -c $((i * 1000000)) /dev/urandom >"$TMP/m$i/data"
  sum "$TMP/m$i/data" >"$TMP/sum$i"
done
# Each daemon serves its own disk: the data did not cross over.
for i in $(seq $N); do
  [[ $(stat -c %s "$TMP/m$i/data") -eq $((i * 1000000)) ]] || fail "disk $i shows another disk's file"
done
pids=()
for i in $(seq $N); do att_umount "$TMP/m$i" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a parallel umount failed"; done
for i in $(seq $N); do no_leaks "$TMP/d$i" "$(cat "$TMP/dev$i")"; done
for i in $(seq $N); do
  att_mount "$TMP/d$i" "$TMP/m$i" >/dev/null
  [[ $(sum "$TMP/m$i/data") == $(cat "$TMP/sum$i") ]] || fail "disk $i data changed"
  att_umount "$TMP/d$i"
done
echo "mount-parallel: ok"
