/* Unit tests for direct access (ploop_disk_map / ploop_disk_unmap): which
 * file and offset a range maps to, when the library must do the I/O itself,
 * and that structure changes wait for pinned mappings. */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define CL (64u << 10)
#define DISK_SIZE (4u << 20)

TestSuite(map, .init = tmpdir_setup, .fini = tmpdir_teardown);

static struct ploop_disk *open_disk(void)
{
  make_disk(DISK_SIZE, CL / 512);
  return NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
}

static uint8_t *aligned_buf(size_t len)
{
  void *p = NULL;
  cr_assert_eq(posix_memalign(&p, 4096, len), 0);
  return p;
}

Test(map, hole_reads_as_zero_and_write_needs_the_library)
{
  struct ploop_disk *disk = open_disk();
  struct ploop_mapping m = {-1, 0};
  cr_assert_eq(ploop_disk_map(disk, 3 * CL, 4096, 0, &m), PLOOP_MAP_ZERO);
  cr_assert_eq(ploop_disk_map(disk, 3 * CL, 4096, PLOOP_MAP_WRITE, &m), PLOOP_MAP_NONE,
               "a write into a hole allocates: the library's job");
  cr_assert_eq(ploop_disk_map(disk, CL - 512, 1024, 0, &m), PLOOP_MAP_NONE, "a range across clusters");
  cr_assert_eq(ploop_disk_map(disk, DISK_SIZE, 512, 0, &m), -1, "past the end is an error");
  OK(ploop_disk_close(disk));
}

Test(map, allocated_cluster_maps_to_its_place_in_the_top)
{
  struct ploop_disk *disk = open_disk();
  uint8_t *b = aligned_buf(CL), *r = aligned_buf(4096);
  fill_pattern(b, CL, 7, 2 * CL);
  OK(ploop_disk_pwrite(disk, b, CL, 2 * CL, 0));

  struct ploop_mapping m;
  cr_assert_eq(ploop_disk_map(disk, 2 * CL + 8192, 4096, 0, &m), PLOOP_MAP_FILE);
  cr_assert_eq(pread(m.fd, r, 4096, (off_t)m.file_offset), 4096);
  cr_assert_eq(check_pattern(r, 4096, 7, 2 * CL + 8192), -1, "the mapped read returns the data");
  ploop_disk_unmap(disk);

  /* A write through the mapping is what the library reads back. */
  cr_assert_eq(ploop_disk_map(disk, 2 * CL + 4096, 4096, PLOOP_MAP_WRITE, &m), PLOOP_MAP_FILE);
  fill_pattern(r, 4096, 9, 2 * CL + 4096);
  cr_assert_eq(pwrite(m.fd, r, 4096, (off_t)m.file_offset), 4096);
  ploop_disk_unmap(disk);
  memset(b, 0, CL);
  OK(ploop_disk_pread(disk, b, CL, 2 * CL));
  cr_assert_eq(check_pattern(b + 4096, 4096, 9, 2 * CL + 4096), -1);
  cr_assert_eq(check_pattern(b, 4096, 7, 2 * CL), -1, "the rest of the cluster is untouched");
  OK(ploop_disk_flush(disk));
  OK(ploop_disk_close(disk));
  free(b);
  free(r);
}

Test(map, after_a_snapshot_reads_map_below_and_writes_need_copy_up)
{
  struct ploop_disk *disk = open_disk();
  uint8_t *b = aligned_buf(CL);
  fill_pattern(b, CL, 3, 0);
  OK(ploop_disk_pwrite(disk, b, CL, 0, 0));
  char guid[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, guid));
  struct ploop_mapping m;
  cr_assert_eq(ploop_disk_map(disk, 512, 512, 0, &m), PLOOP_MAP_FILE);
  ploop_disk_unmap(disk);
  cr_assert_eq(ploop_disk_map(disk, 512, 512, PLOOP_MAP_WRITE, &m), PLOOP_MAP_NONE,
               "the top does not hold the cluster: copy-up is the library's job");
  OK(ploop_disk_close(disk));
  free(b);
}

Test(map, mapped_write_counts_for_dirty_tracking)
{
  struct ploop_disk *disk = open_disk();
  uint8_t *b = aligned_buf(CL);
  memset(b, 0x5a, CL);
  OK(ploop_disk_pwrite(disk, b, CL, 5 * CL, 0));
  OK(ploop_disk_dirty_start(disk));
  struct ploop_mapping m;
  cr_assert_eq(ploop_disk_map(disk, 5 * CL, 4096, PLOOP_MAP_WRITE, &m), PLOOP_MAP_FILE);
  ploop_disk_unmap(disk);
  uint8_t bits[DISK_SIZE / CL / 8] = {0};
  OK(ploop_disk_dirty_get(disk, bits, sizeof bits, true));
  cr_assert_eq(bits[0], 1u << 5, "cluster 5 dirty, nothing else: 0x%02x", bits[0]);
  OK(ploop_disk_close(disk));
  free(b);
}

struct snap_arg {
  struct ploop_disk *disk;
  int rc;
  volatile int done;
};

static void *take_snapshot(void *p)
{
  struct snap_arg *a = p;
  char guid[PLOOP_UUID_LEN + 1];
  a->rc = ploop_disk_snapshot(a->disk, NULL, guid);
  a->done = 1;
  return NULL;
}

Test(map, a_snapshot_waits_for_pinned_mappings_and_refuses_new_ones)
{
  struct ploop_disk *disk = open_disk();
  uint8_t *b = aligned_buf(CL);
  memset(b, 1, CL);
  OK(ploop_disk_pwrite(disk, b, CL, 0, 0));
  struct ploop_mapping m;
  cr_assert_eq(ploop_disk_map(disk, 0, 4096, PLOOP_MAP_WRITE, &m), PLOOP_MAP_FILE);
  struct snap_arg a = {disk, -2, 0};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, take_snapshot, &a), 0);
  usleep(100 * 1000);
  cr_assert_eq(a.done, 0, "the snapshot must wait while a mapped write may be in flight");
  /* Meanwhile: no new mapping, and the blocking calls still work. */
  struct ploop_mapping m2;
  cr_assert_eq(ploop_disk_map(disk, CL, 512, 0, &m2), PLOOP_MAP_NONE);
  OK(ploop_disk_pread(disk, b, 4096, 0));
  ploop_disk_unmap(disk);
  pthread_join(t, NULL);
  cr_assert_eq(a.rc, 0, "snapshot: %s", ploop_get_error());
  cr_assert_eq(ploop_disk_depth(disk), 2);
  cr_assert_eq(ploop_disk_map(disk, 0, 512, 0, &m2), PLOOP_MAP_FILE, "mappings resume after it");
  ploop_disk_unmap(disk);
  OK(ploop_disk_close(disk));
  free(b);
}

Test(map, read_only_disk_refuses_write_mappings)
{
  make_disk(DISK_SIZE, CL / 512);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  struct ploop_mapping m;
  cr_assert_eq(ploop_disk_map(disk, 0, 512, PLOOP_MAP_WRITE, &m), -1);
  cr_assert_eq(ploop_get_errno(), EROFS);
  OK(ploop_disk_close(disk));
}
