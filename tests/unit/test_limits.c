/* Limits and locks ploop users rely on: 126 snapshots; one writer; no merge under a snapshot reader. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libploop.h"

Test(limits, one_hundred_twenty_six_snapshots)
{
  char dir[256], path[300], cmd[600];
  snprintf(dir, sizeof dir, "/var/tmp/ploop-unit-limits.%d", getpid());
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
  cr_assert_eq(system(cmd), 0);
  snprintf(path, sizeof path, "%s/root.hds", dir);
  struct ploop_delta_create_params p = {.size_bytes = 1 << 20, .cluster_sectors = 64};
  cr_assert_eq(ploop_disk_create(path, &p), 0, "%s", ploop_get_error());
  struct ploop_disk *disk = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDWR);
  cr_assert_not_null(disk, "%s", ploop_get_error());
  char guid[PLOOP_UUID_LEN + 1], buf[512];
  for (int i = 0; i < 126; i++) {
    memset(buf, i + 1, sizeof buf);
    cr_assert_eq(ploop_disk_pwrite(disk, buf, sizeof buf, (uint64_t)i * 512, 0), 0, "%s", ploop_get_error());
    cr_assert_eq(ploop_disk_snapshot(disk, NULL, guid), 0, "snapshot %d: %s", i + 1, ploop_get_error());
  }
  cr_assert_eq(ploop_disk_depth(disk), 127u);
  cr_assert_eq(ploop_disk_snapshot(disk, NULL, guid), -1);
  cr_assert(strstr(ploop_get_error(), "at most 126 snapshots"), "got: %s", ploop_get_error());
  /* Every write is still visible through the whole stack. */
  for (int i = 0; i < 126; i++) {
    cr_assert_eq(ploop_disk_pread(disk, buf, sizeof buf, (uint64_t)i * 512), 0);
    cr_assert_eq(buf[0], i + 1);
    cr_assert_eq(buf[511], i + 1);
  }
  cr_assert_eq(ploop_disk_close(disk), 0, "%s", ploop_get_error());
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}

/* A reader of a snapshot blocks what would rewrite that snapshot's delta
 * (merge, delete, switch, convert), but not a new snapshot; a writer blocks a
 * second writer and says who it is. */
Test(limits, snapshot_readers_block_merge)
{
  char dir[256], path[300], cmd[600];
  snprintf(dir, sizeof dir, "/var/tmp/ploop-unit-locks.%d", getpid());
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
  cr_assert_eq(system(cmd), 0);
  snprintf(path, sizeof path, "%s/root.hds", dir);
  struct ploop_delta_create_params p = {.size_bytes = 4 << 20, .cluster_sectors = 64};
  cr_assert_eq(ploop_disk_create(path, &p), 0, "%s", ploop_get_error());
  char s1[PLOOP_UUID_LEN + 1], s2[PLOOP_UUID_LEN + 1];
  cr_assert_eq(ploop_snapshot_create(dir, NULL, s1), 0, "%s", ploop_get_error());

  struct ploop_disk *reader = ploop_disk_open(dir, s1, PLOOP_OPEN_RDONLY);
  cr_assert_not_null(reader, "%s", ploop_get_error());
  cr_assert_eq(ploop_snapshot_merge(dir, NULL, true, NULL, NULL), -1, "merge ran under a reader");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_BUSY, "%s", ploop_get_error());
  cr_assert(strstr(ploop_get_error(), "snapshot of the disk is open"), "got: %s", ploop_get_error());
  cr_assert_eq(ploop_convert_version(dir, 1), -1, "convert ran under a reader");
  cr_assert_eq(ploop_snapshot_create(dir, NULL, s2), 0, "snapshot refused under a reader: %s", ploop_get_error());

  struct ploop_disk *w1 = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDWR);
  cr_assert_not_null(w1, "%s", ploop_get_error());
  cr_assert_null(ploop_disk_open(dir, NULL, PLOOP_OPEN_RDWR), "two writers");
  cr_assert(strstr(ploop_get_error(), "locked by pid"), "got: %s", ploop_get_error());
  cr_assert_eq(ploop_disk_close(w1), 0);

  cr_assert_eq(ploop_disk_close(reader), 0);
  cr_assert_eq(ploop_snapshot_merge(dir, NULL, true, NULL, NULL), 0, "%s", ploop_get_error());
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}
