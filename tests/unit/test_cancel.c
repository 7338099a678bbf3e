/* Unit tests for cancellation (ploop_cancel) of long operations, the
 * header's Empty flag after an open with no writes, and a Disk_size that
 * disagrees with the top image (refused; check reports, check -F repairs). */
#include "helpers.h"

#define CL 65536u
#define SIZE (4u << 20) /* 64 clusters of 64 KiB */
#define FLAGS_OFF 52    /* m_Flags in the 64-byte header */

TestSuite(cancel, .init = tmpdir_setup, .fini = tmpdir_teardown);

static void write_clusters(uint32_t seed, unsigned first, unsigned n)
{
  struct ploop_disk *d = NOTNULL(ploop_disk_open(tpath(""), NULL, PLOOP_OPEN_RDWR));
  static uint8_t buf[CL];
  for (unsigned i = first; i < first + n; i++) {
    fill_pattern(buf, CL, seed, (uint64_t)i * CL);
    OK(ploop_disk_pwrite(d, buf, CL, (uint64_t)i * CL, 0));
  }
  OK(ploop_disk_close(d));
}

static void assert_cancelled(int rc)
{
  cr_assert_eq(rc, -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_CANCELLED, "status %d (%s)", ploop_get_status(),
               ploop_get_error());
  cr_assert_eq(ploop_get_errno(), EINTR);
}

Test(cancel, export_stops_and_reset_lets_it_run)
{
  make_disk(SIZE, CL / 512);
  write_clusters(1, 0, 8);
  ploop_cancel();
  cr_assert(ploop_cancelled());
  assert_cancelled(ploop_export_raw(tpath(""), NULL, tpath("out.raw"), NULL, NULL, NULL));
  ploop_cancel_reset();
  cr_assert(!ploop_cancelled());
  OK(ploop_export_raw(tpath(""), NULL, tpath("out.raw"), NULL, NULL, NULL));
  cr_assert_eq(file_size(tpath("out.raw")), SIZE);
}

Test(cancel, import_into_a_disk_leaves_it_clean)
{
  make_disk(SIZE, CL / 512);
  write_clusters(2, 0, 4);
  int fd = open(tpath("src.raw"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert(fd >= 0);
  cr_assert_eq(ftruncate(fd, SIZE), 0);
  close(fd);
  static uint8_t buf[CL];
  fill_pattern(buf, CL, 3, 0);
  raw_pwrite(tpath("src.raw"), buf, CL, 5 * CL);
  ploop_cancel();
  assert_cancelled(ploop_import_raw(tpath("src.raw"), tpath(""), NULL, NULL, NULL));
  ploop_cancel_reset();
  char msg[1024];
  cr_assert_eq(ploop_disk_check(tpath(""), PLOOP_CHECK_FORCE | PLOOP_CHECK_READONLY, msg, sizeof msg), 0, "%s",
               msg);
  /* Nothing was written: the old clusters read as before. */
  struct ploop_disk *d = NOTNULL(ploop_disk_open(tpath(""), NULL, PLOOP_OPEN_RDONLY));
  OK(ploop_disk_pread(d, buf, CL, 3 * CL));
  cr_assert_eq(check_pattern(buf, CL, 2, 3 * CL), -1);
  OK(ploop_disk_close(d));
}

Test(cancel, merge_stops_with_the_disk_reading_as_before)
{
  make_disk(SIZE, CL / 512);
  write_clusters(4, 0, 16);
  char snap[PLOOP_UUID_LEN + 1];
  OK(ploop_snapshot_create(tpath(""), NULL, snap));
  write_clusters(5, 8, 16);
  OK(ploop_export_raw(tpath(""), NULL, tpath("before.raw"), NULL, NULL, NULL));
  ploop_cancel();
  assert_cancelled(ploop_snapshot_merge(tpath(""), NULL, false, NULL, NULL));
  ploop_cancel_reset();
  OK(ploop_export_raw(tpath(""), NULL, tpath("after.raw"), NULL, NULL, NULL));
  static uint8_t a[SIZE], b[SIZE];
  raw_pread(tpath("before.raw"), a, SIZE, 0);
  raw_pread(tpath("after.raw"), b, SIZE, 0);
  cr_assert(memcmp(a, b, SIZE) == 0, "an interrupted merge changed the disk's contents");
  /* Running it again finishes it. */
  OK(ploop_snapshot_merge(tpath(""), NULL, false, NULL, NULL));
  struct ploop_disk *d = NOTNULL(ploop_disk_open(tpath(""), NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_depth(d), 1);
  OK(ploop_disk_close(d));
}

Test(cancel, open_and_close_without_writes_keeps_the_empty_flag)
{
  make_disk(SIZE, CL / 512);
  cr_assert_eq(raw_le32(tpath("root.hds"), FLAGS_OFF) & 1, 1, "a new delta is marked empty");
  struct ploop_disk *d = NOTNULL(ploop_disk_open(tpath(""), NULL, PLOOP_OPEN_RDWR));
  OK(ploop_disk_close(d));
  cr_assert_eq(raw_le32(tpath("root.hds"), FLAGS_OFF) & 1, 1, "closed with no clusters: still empty");
  write_clusters(6, 0, 1);
  cr_assert_eq(raw_le32(tpath("root.hds"), FLAGS_OFF) & 1, 0, "a delta holding a cluster is not empty");
}

Test(cancel, disk_size_disagreeing_with_the_image_is_refused_and_repaired)
{
  make_disk(SIZE, CL / 512);
  struct ploop_descriptor *desc = NOTNULL(ploop_descriptor_load(tpath("")));
  desc->size_sectors *= 2;
  OK(ploop_descriptor_save(desc));
  ploop_descriptor_free(desc);
  cr_assert_null(ploop_disk_open(tpath(""), NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_CORRUPT, "%s", ploop_get_error());
  char msg[1024];
  cr_assert_eq(ploop_disk_check(tpath(""), PLOOP_CHECK_FORCE, msg, sizeof msg), 1);
  cr_assert(strstr(msg, "Disk_size"), "%s", msg);
  cr_assert_eq(ploop_disk_check(tpath(""), PLOOP_CHECK_FORCE | PLOOP_CHECK_REPAIR, msg, sizeof msg), 0, "%s",
               msg);
  struct ploop_disk *d = NOTNULL(ploop_disk_open(tpath(""), NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_size(d), SIZE);
  OK(ploop_disk_close(d));
}

/* Compaction stopped by ploop_cancel: between two moves, the tail cut off,
 * the holes left below the end allocated (no sparse delta), every cluster
 * reading as before; compacting again finishes the work. */
Test(cancel, compaction_stops_consistent_and_not_sparse)
{
  make_disk(SIZE, CL / 512);
  write_clusters(7, 0, 32);
  struct ploop_disk *d = NOTNULL(ploop_disk_open(tpath(""), NULL, PLOOP_OPEN_RDWR));
  for (unsigned i = 0; i < 32; i += 2)
    OK(ploop_disk_discard(d, (uint64_t)i * CL, CL));
  OK(ploop_disk_flush(d));
  off_t full = file_size(tpath("root.hds"));
  ploop_cancel();
  uint64_t reclaimed = 1;
  assert_cancelled(ploop_disk_compact(d, &reclaimed));
  ploop_cancel_reset();
  OK(ploop_disk_close(d));
  /* Allocated, not necessarily written (SEEK_HOLE counts unwritten extents
   * as holes; OpenVZ's check accepts whole unwritten clusters). */
  struct stat st;
  cr_assert_eq(stat(tpath("root.hds"), &st), 0);
  cr_assert_geq((off_t)st.st_blocks * 512, st.st_size, "%lld of %lld bytes allocated after a stopped compaction",
                (long long)st.st_blocks * 512, (long long)st.st_size);
  char msg[1024];
  cr_assert_eq(ploop_disk_check(tpath(""), PLOOP_CHECK_FORCE | PLOOP_CHECK_READONLY, msg, sizeof msg), 0, "%s",
               msg);
  d = NOTNULL(ploop_disk_open(tpath(""), NULL, PLOOP_OPEN_RDWR));
  static uint8_t buf[CL];
  for (unsigned i = 0; i < 32; i++) {
    OK(ploop_disk_pread(d, buf, CL, (uint64_t)i * CL));
    if (i % 2)
      cr_assert_eq(check_pattern(buf, CL, 7, (uint64_t)i * CL), -1, "cluster %u changed", i);
    else
      cr_assert_eq(first_nonzero(buf, CL), -1, "discarded cluster %u not zero", i);
  }
  OK(ploop_disk_compact(d, &reclaimed));
  OK(ploop_disk_close(d));
  cr_assert_lt(file_size(tpath("root.hds")), full - 15 * (off_t)CL, "compacting again did not finish");
}
