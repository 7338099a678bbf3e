/* Limits ploop users rely on: 126 snapshots, and the refusal after that. */
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
