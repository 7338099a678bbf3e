#!/usr/bin/env bash
# The user's snapshots travel with a migration: after an online migration
# (and after a cold copy) the destination lists the same snapshots, GUIDs
# and parents, once it has merged the migration's own temporary snapshots
# away; each user snapshot still holds the data it held at the source.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"

# "uuid parent" of every snapshot (the top, whose GUID is fixed, left out).
snap_tree() { "$PLOOP" snapshot-list -H -o uuid,parent_uuid,current "$1" | awk '$3 != "*" {print $1, $2}' | sort; }
wait_images() {  # DISK N: the destination's background merge done
  local i
  for i in $(seq 300); do [[ $(n_images "$1") -eq $2 ]] && return 0; sleep 0.1; done
  fail "$1 has $(n_images "$1") images, want $2: $("$PLOOP" snapshot-list "$1")"
}

start_writer web 128M
src exec web -- /bin/sh -c 'echo one > /mark; sync'
src snapshot web >/dev/null
src exec web -- /bin/sh -c 'echo two > /mark; sync'
src snapshot web >/dev/null
want=$(snap_tree "$SRC/web/disk")
[[ $(wc -l <<<"$want") -eq 2 ]] || fail "setup: two snapshots expected: $want"

start_receiver
migrate web --no-criu --min-round 0 --max-rounds 2 >"$TMP/out" 2>&1 || fail "migrate failed: $(cat "$TMP/out") / $(cat "$TMP/recv.err")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
wait_images "$DST/web/disk" 3
got=$(snap_tree "$DST/web/disk")
[[ $got == "$want" ]] || fail "snapshots differ: source had
$want
destination has
$got"
# the oldest snapshot still reads as it did: /mark was "one" there
first=$(head -n 1 <<<"$want" | cut -d' ' -f1)
old=$("$PLOOP" snapshot-list -H -o uuid,parent_uuid "$DST/web/disk" | awk '$2 ~ /^\{0+-/ {print $1}')
mkdir -p "$TMP/m"
"$PLOOP" mount -r -u "$old" -m "$TMP/m" "$DST/web/disk" >/dev/null || fail "cannot mount snapshot $old"
mark=$(cat "$TMP/m/mark")
"$PLOOP" umount -u "$old" "$DST/web/disk" >/dev/null 2>&1 || "$PLOOP" umount "$TMP/m" >/dev/null 2>&1 || true
[[ $mark == one ]] || fail "the oldest snapshot reads '$mark', not 'one'"
echo "online: ok ($first ...)"

# a cold copy back keeps them too
dst stop web --timeout 2
tmp=$SRC; SRC=$DST; DST=$tmp
tmp=$NS_A; NS_A=$NS_B; NS_B=$tmp; tmp=$ADDR_A; ADDR_A=$ADDR_B; ADDR_B=$tmp
[[ ! -e $SRC/web/migration ]] || fail "the destination kept the record of a finished migration"
start_receiver
migrate web >"$TMP/out" 2>&1 || fail "cold migrate failed: $(cat "$TMP/out") / $(cat "$TMP/recv.err")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
wait_images "$DST/web/disk" 3
got=$(snap_tree "$DST/web/disk")
[[ $got == "$want" ]] || fail "cold copy: snapshots differ: $got"
echo "cold: ok"
