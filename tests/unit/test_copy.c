/* Unit tests for raw import/export: the virtual disk equals the raw file,
 * zero clusters stay holes, a re-import writes nothing, snapshots export. */
#include "helpers.h"

#define CL 65536u
#define DISK_SIZE (4u << 20) /* 64 clusters */

TestSuite(copy, .init = tmpdir_setup, .fini = tmpdir_teardown);

/* A raw file of SIZE bytes with data in a few places, zeros elsewhere. */
static void make_raw(const char *path, uint64_t size, uint32_t seed)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert(fd >= 0);
  cr_assert_eq(ftruncate(fd, (off_t)size), 0);
  close(fd);
  static uint8_t b[3 * CL];
  fill_pattern(b, CL, seed, 0);
  raw_pwrite(path, b, CL < size ? CL : size, 0);
  if (size >= 13 * CL) {
    fill_pattern(b, 3 * CL - 100, seed, 10 * CL + 100);
    raw_pwrite(path, b, 3 * CL - 100, 10 * CL + 100);
  }
  if (size > 4096) {
    fill_pattern(b, 4096, seed, size - 4096);
    raw_pwrite(path, b, 4096, size - 4096);
  }
}

static void assert_files_equal(const char *a, const char *b, uint64_t n)
{
  uint8_t *x = malloc(n), *y = malloc(n);
  raw_pread(a, x, n, 0);
  raw_pread(b, y, n, 0);
  for (uint64_t i = 0; i < n; i++)
    cr_assert_eq(x[i], y[i], "%s and %s differ at byte %llu", a, b, (unsigned long long)i);
  free(x);
  free(y);
}

Test(copy, import_into_new_disk_then_export_round_trips)
{
  const char *src = tpath("src.raw");
  make_raw(src, DISK_SIZE, 1);
  cr_assert_eq(mkdir(tpath("disk"), 0755), 0);
  struct ploop_copy_stats st;
  memset(&st, 0xff, sizeof st);
  OK(ploop_import_raw(src, tpath("disk"), NULL, NULL, &st));
  cr_assert_eq(st.bytes_total, DISK_SIZE);
  /* A new disk has 1 MiB clusters: data only in clusters 0 and 3. */
  cr_assert_eq(st.clusters_written, 2, "written %llu", (unsigned long long)st.clusters_written);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(tpath("disk/root.hds"), PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(d, &in));
  cr_assert_eq(in.cluster_bytes, 1 << 20);
  cr_assert_eq(in.allocated_clusters, 2, "zero clusters must stay holes");
  cr_assert_eq(in.virtual_bytes, DISK_SIZE);
  OK(ploop_delta_close(d));

  const char *dst = tpath("dst.raw");
  OK(ploop_export_raw(tpath("disk"), NULL, dst, NULL, NULL, NULL));
  cr_assert_eq(file_size(dst), DISK_SIZE);
  assert_files_equal(src, dst, DISK_SIZE);
  struct stat sb;
  cr_assert_eq(stat(dst, &sb), 0);
  cr_assert_leq((uint64_t)sb.st_blocks * 512, 2u << 20, "export should hold only the 2 data clusters");
}

Test(copy, reimport_writes_only_changed_clusters)
{
  const char *src = tpath("src.raw");
  make_raw(src, DISK_SIZE, 1);
  make_disk(DISK_SIZE, CL / 512); /* 64 KiB clusters: data in 0, 10-12, 63 */
  struct ploop_copy_stats st;
  OK(ploop_import_raw(src, test_dir, NULL, NULL, &st));
  cr_assert_eq(st.clusters_written, 5, "written %llu", (unsigned long long)st.clusters_written);
  off_t size1 = file_size(tpath("root.hds"));
  OK(ploop_import_raw(src, test_dir, NULL, NULL, &st));
  cr_assert_eq(st.clusters_written, 0, "unchanged source rewrote %llu clusters",
               (unsigned long long)st.clusters_written);
  cr_assert_eq(file_size(tpath("root.hds")), size1);
  /* Change one byte in cluster 20 and zero cluster 0: one write, one zeroing. */
  raw_pwrite(src, "x", 1, 20 * CL + 7);
  static uint8_t z[CL];
  raw_pwrite(src, z, CL, 0);
  OK(ploop_import_raw(src, test_dir, NULL, NULL, &st));
  cr_assert_eq(st.clusters_written, 1, "written %llu", (unsigned long long)st.clusters_written);
  cr_assert_eq(st.clusters_zeroed, 1, "zeroed %llu", (unsigned long long)st.clusters_zeroed);
  const char *dst = tpath("dst.raw");
  OK(ploop_export_raw(test_dir, NULL, dst, NULL, NULL, NULL));
  assert_files_equal(src, dst, DISK_SIZE);
}

Test(copy, import_source_not_a_sector_multiple)
{
  const char *src = tpath("odd.raw");
  make_raw(src, 3 * CL + 1000, 2);
  cr_assert_eq(mkdir(tpath("disk"), 0755), 0);
  OK(ploop_import_raw(src, tpath("disk"), NULL, NULL, NULL));
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(tpath("disk"), NULL, PLOOP_OPEN_RDONLY));
  cr_assert_geq(ploop_disk_size(disk), 3 * CL + 1000);
  uint64_t n = ploop_disk_size(disk);
  uint8_t *b = malloc(n), *want = calloc(1, n);
  raw_pread(src, want, 3 * CL + 1000, 0);
  OK(ploop_disk_pread(disk, b, n, 0));
  for (uint64_t i = 0; i < n; i++)
    cr_assert_eq(b[i], want[i], "byte %llu", (unsigned long long)i);
  free(b);
  free(want);
  OK(ploop_disk_close(disk));
}

Test(copy, import_refuses_source_larger_than_disk)
{
  make_disk(DISK_SIZE, CL / 512);
  const char *src = tpath("big.raw");
  make_raw(src, DISK_SIZE + CL, 3);
  cr_assert_eq(ploop_import_raw(src, test_dir, NULL, NULL, NULL), -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM);
  ERROR_NAMES("big.raw");
  cr_assert_eq(ploop_import_raw(tpath("missing.raw"), test_dir, NULL, NULL, NULL), -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_NOTFOUND);
}

Test(copy, export_of_a_snapshot)
{
  const char *src = tpath("src.raw");
  make_raw(src, DISK_SIZE, 4);
  OK(ploop_import_raw(src, test_dir, NULL, NULL, NULL));
  char g[PLOOP_UUID_LEN + 1];
  OK(ploop_snapshot_create(test_dir, NULL, g));
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  uint8_t b[4096];
  memset(b, 0x77, sizeof b);
  OK(ploop_disk_pwrite(disk, b, sizeof b, 5 * CL, 0));
  OK(ploop_disk_close(disk));
  const char *snap = tpath("snap.raw"), *top = tpath("top.raw");
  OK(ploop_export_raw(test_dir, g, snap, NULL, NULL, NULL));
  OK(ploop_export_raw(test_dir, NULL, top, NULL, NULL, NULL));
  assert_files_equal(src, snap, DISK_SIZE);
  uint8_t got[4096];
  raw_pread(top, got, sizeof got, 5 * CL);
  cr_assert_arr_eq(got, b, sizeof b, "top export misses the write after the snapshot");
}

struct prog {
  uint64_t calls, last_done, last_total;
};
static void on_progress(void *opaque, uint64_t done, uint64_t total)
{
  struct prog *p = opaque;
  cr_assert_geq(done, p->last_done, "progress went backwards");
  p->calls++;
  p->last_done = done;
  p->last_total = total;
}

Test(copy, progress_reaches_total)
{
  const char *src = tpath("src.raw");
  make_raw(src, DISK_SIZE, 5);
  struct prog p = {0};
  OK(ploop_import_raw(src, test_dir, on_progress, &p, NULL));
  cr_assert_gt(p.calls, 0);
  cr_assert_eq(p.last_done, p.last_total);
  memset(&p, 0, sizeof p);
  OK(ploop_export_raw(test_dir, NULL, tpath("o.raw"), on_progress, &p, NULL));
  cr_assert_gt(p.calls, 0);
  cr_assert_eq(p.last_done, p.last_total);
}

/* 32 MiB of data in 64 KiB clusters: more clusters than one I/O batch holds
 * (the CLI saw this size hang, 07:14 in /work/api-requests.md). */
Test(copy, import_many_small_clusters_completes, .timeout = 60)
{
  const char *src = tpath("big.raw");
  int fd = open(src, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert(fd >= 0);
  static uint8_t b[1 << 20];
  for (uint32_t i = 0; i < 32; i++) {
    fill_pattern(b, sizeof b, 9, (uint64_t)i << 20);
    cr_assert_eq(write(fd, b, sizeof b), (ssize_t)sizeof b);
  }
  close(fd);
  make_disk(64ull << 20, CL / 512);
  struct ploop_copy_stats st;
  OK(ploop_import_raw(src, test_dir, NULL, NULL, &st));
  cr_assert_eq(st.clusters_written, 512);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  for (uint32_t i = 0; i < 32; i++) {
    OK(ploop_disk_pread(disk, b, sizeof b, (uint64_t)i << 20));
    cr_assert_eq(check_pattern(b, sizeof b, 9, (uint64_t)i << 20), -1, "MiB %u differs", i);
  }
  OK(ploop_disk_close(disk));
}
