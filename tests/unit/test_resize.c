/* Unit tests for resize: grow (with BAT relocation, online, under writers,
 * with snapshots) keeps every byte; shrink needs FORCE and never resurrects
 * data past the cut. */
#define CL 32768u
#define DISK_SIZE (4u << 20) /* 128 clusters of 32 KiB */

#include "stack.h"

TestSuite(resize, .init = tmpdir_setup, .fini = tmpdir_teardown);

Test(resize, grow_relocates_clusters_behind_the_bat)
{
  /* 4 MiB at 32 KiB: BAT fits in one cluster, data from file cluster 1.
   * 512 MiB needs 16384 entries = 65600 bytes = 3 header clusters, so the
   * data clusters at file offsets 1 and 2 must move. */
  make_disk(DISK_SIZE, CL / 512);
  static uint8_t model[DISK_SIZE];
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put(disk, 1, 7 * CL, CL);
  put(disk, 2, 0, CL);
  put(disk, 3, 100 * CL + 5, 3 * CL);
  model_put(model, 1, 7 * CL, CL);
  model_put(model, 2, 0, CL);
  model_put(model, 3, 100 * CL + 5, 3 * CL);
  OK(ploop_disk_close(disk));
  const char *p = tpath("root.hds");
  cr_assert_eq(raw_le32(p, 64 + 4 * 7), 1, "precondition: cluster 7 sits right after the BAT");

  OK(ploop_resize(test_dir, 512ull << 20, 0));

  cr_assert_eq(raw_le32(p, 32), 16384, "m_Size");
  cr_assert_eq(raw_le64(p, 36), (512ull << 20) / 512, "m_SizeInSectors");
  cr_assert_eq(raw_le32(p, 48), 3 * 64, "m_FirstBlockOffset");
  for (int i = 0; i < 16384; i++) {
    uint32_t e = raw_le32(p, 64 + 4 * i);
    cr_assert(e == 0 || e >= 3, "BAT[%d]=%u points into the grown BAT", i, e);
  }
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert_eq(d->size_sectors, (512ull << 20) / 512, "descriptor Disk_size not updated");
  ploop_descriptor_free(d);
  assert_all_deltas_clean();

  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  cr_assert_eq(ploop_disk_size(disk), 512ull << 20);
  uint8_t *b = malloc(DISK_SIZE);
  OK(ploop_disk_pread(disk, b, DISK_SIZE, 0));
  assert_equal_model(b, model, DISK_SIZE, "old area after grow");
  OK(ploop_disk_pread(disk, b, DISK_SIZE, (512ull << 20) - DISK_SIZE));
  cr_assert_eq(first_nonzero(b, DISK_SIZE), -1, "new area must read as zeros");
  put(disk, 4, (512ull << 20) - 4096, 4096);
  OK(ploop_disk_pread(disk, b, 4096, (512ull << 20) - 4096));
  cr_assert_eq(check_pattern(b, 4096, 4, (512ull << 20) - 4096), -1);
  free(b);
  OK(ploop_disk_close(disk));
}

Test(resize, online_grow)
{
  struct ploop_disk *disk = new_disk();
  put(disk, 1, 0, 2 * CL);
  OK(ploop_disk_resize(disk, 2 * DISK_SIZE, 0));
  cr_assert_eq(ploop_disk_size(disk), 2 * DISK_SIZE);
  put(disk, 2, 2 * DISK_SIZE - CL, CL);
  uint8_t b[2 * CL];
  OK(ploop_disk_pread(disk, b, 2 * CL, 0));
  cr_assert_eq(check_pattern(b, 2 * CL, 1, 0), -1);
  OK(ploop_disk_close(disk));
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_size(disk), 2 * DISK_SIZE);
  OK(ploop_disk_pread(disk, b, CL, 2 * DISK_SIZE - CL));
  cr_assert_eq(check_pattern(b, CL, 2, 2 * DISK_SIZE - CL), -1);
  OK(ploop_disk_close(disk));
}

Test(resize, grow_with_snapshot_keeps_both_views)
{
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  OK(ploop_resize(test_dir, 64ull << 20, 0));
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  cr_assert_eq(ploop_disk_size(disk), 64ull << 20);
  uint8_t *b = malloc(DISK_SIZE);
  OK(ploop_disk_pread(disk, b, DISK_SIZE, 0));
  assert_equal_model(b, model, DISK_SIZE, "top after grow");
  OK(ploop_disk_pread(disk, b, DISK_SIZE, 60ull << 20));
  cr_assert_eq(first_nonzero(b, DISK_SIZE), -1);
  free(b);
  OK(ploop_disk_close(disk));
  assert_all_deltas_clean();
}

Test(resize, shrink_needs_force)
{
  struct ploop_disk *disk = new_disk();
  put(disk, 1, 0, DISK_SIZE);
  OK(ploop_disk_close(disk));
  const char *p = tpath("root.hds");
  cr_assert_eq(ploop_resize(test_dir, DISK_SIZE / 2, 0), -1, "shrink without FORCE accepted");
  cr_assert_eq(raw_le64(p, 36), DISK_SIZE / 512, "refused shrink changed the header");
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert_eq(d->size_sectors, DISK_SIZE / 512, "refused shrink changed the descriptor");
  ploop_descriptor_free(d);

  OK(ploop_resize(test_dir, DISK_SIZE / 2, PLOOP_RESIZE_FORCE));
  cr_assert_eq(raw_le64(p, 36), DISK_SIZE / 1024);
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_size(disk), DISK_SIZE / 2);
  uint8_t *b = malloc(DISK_SIZE / 2);
  OK(ploop_disk_pread(disk, b, DISK_SIZE / 2, 0));
  cr_assert_eq(check_pattern(b, DISK_SIZE / 2, 1, 0), -1, "kept part changed by shrink");
  cr_assert_eq(ploop_disk_pread(disk, b, 512, DISK_SIZE / 2), -1, "read past new end");
  free(b);
  OK(ploop_disk_close(disk));
  assert_all_deltas_clean();
}

Test(resize, rejects_zero_and_oversized)
{
  make_disk(DISK_SIZE, CL / 512);
  cr_assert_eq(ploop_resize(test_dir, 0, PLOOP_RESIZE_FORCE), -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM, "%s", ploop_get_error());
  cr_assert_eq(ploop_resize(test_dir, 51ull << 40, 0), -1, "over the 50 TiB limit");
}

Test(resize, shrink_then_grow_exposes_zeros_not_old_data)
{
  /* Data past the new end must not come back when the disk grows again,
   * neither from the top nor from a snapshot below it. */
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1); /* data in clusters 0-5, S1 below the top */
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put(disk, 9, DISK_SIZE - 3 * CL, 3 * CL); /* tail in the top */
  OK(ploop_disk_close(disk));
  OK(ploop_resize(test_dir, 2 * CL, PLOOP_RESIZE_FORCE)); /* cuts clusters 2-5 (in S1 and top) */
  OK(ploop_resize(test_dir, DISK_SIZE, 0));
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_size(disk), DISK_SIZE);
  uint8_t *b = read_all(disk);
  OK(ploop_disk_close(disk));
  assert_equal_model(b, model, 2 * CL, "kept part");
  long nz = first_nonzero(b + 2 * CL, DISK_SIZE - 2 * CL);
  cr_assert_eq(nz, -1, "byte %ld past the shrink point came back after grow", nz + 2 * CL);
  free(b);
  assert_all_deltas_clean();
}

Test(resize, online_grow_with_relocation_under_concurrent_writers)
{
  /* 4 MiB -> 512 MiB at 32 KiB clusters needs 3 header clusters: the data
   * clusters behind the BAT move while the writers keep rewriting them. */
  static uint64_t done[NCLUSTERS];
  struct ploop_disk *disk = new_disk();
  struct writers ws;
  writers_start(&ws, disk, done);
  usleep(30000);
  OK(ploop_disk_resize(disk, 512ull << 20, 0));
  cr_assert_eq(ploop_disk_size(disk), 512ull << 20);
  usleep(30000);
  writers_stop(&ws);
  OK(ploop_disk_close(disk));
  uint64_t v[NCLUSTERS];
  view_versions(NULL, v);
  for (uint32_t c = 0; c < NCLUSTERS; c++)
    cr_assert_eq(v[c], done[c], "cluster %u holds version %llu, last written %llu", c,
                 (unsigned long long)v[c], (unsigned long long)done[c]);
  cr_assert_eq(raw_le32(tpath("root.hds"), 48), 3 * 64, "BAT did not grow to 3 clusters");
  assert_all_deltas_clean();
}
