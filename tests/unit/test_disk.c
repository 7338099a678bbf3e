/* Unit tests for the disk (a stack of deltas) I/O path: reads and writes at any
 * alignment, allocation, discard/write_zeroes, block status, flush, dirty
 * tracking; on-disk results are checked with plain pread against the format. */
#include <pthread.h>

#include "helpers.h"

#define CL 32768u            /* 64-sector clusters */
#define DISK_SIZE (8u << 20) /* 256 clusters, BAT in one cluster */
#define BAT0 64

TestSuite(disk, .init = tmpdir_setup, .fini = tmpdir_teardown);

static struct ploop_disk *open_rw(void)
{
  make_disk(DISK_SIZE, CL / 512);
  return NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
}

static void *xaligned(size_t len)
{
  void *p = NULL;
  cr_assert_eq(posix_memalign(&p, 4096, len + 4096), 0);
  return p;
}

/* Writes the pattern for SEED at [OFF, OFF+LEN) through the library. */
static void put(struct ploop_disk *disk, uint32_t seed, uint64_t off, size_t len)
{
  uint8_t *b = malloc(len);
  fill_pattern(b, len, seed, off);
  OK(ploop_disk_pwrite(disk, b, len, off, 0));
  free(b);
}

static void expect_pattern(struct ploop_disk *disk, uint32_t seed, uint64_t off, size_t len)
{
  uint8_t *b = malloc(len);
  memset(b, 0xEE, len);
  OK(ploop_disk_pread(disk, b, len, off));
  long bad = check_pattern(b, len, seed, off);
  cr_assert_eq(bad, -1, "byte %llu differs from seed %u", (unsigned long long)off + bad, seed);
  free(b);
}

static void expect_zeros(struct ploop_disk *disk, uint64_t off, size_t len)
{
  uint8_t *b = malloc(len);
  memset(b, 0xEE, len);
  OK(ploop_disk_pread(disk, b, len, off));
  long nz = first_nonzero(b, len);
  cr_assert_eq(nz, -1, "byte %llu should be zero, is 0x%02x", (unsigned long long)off + nz,
               nz >= 0 ? b[nz] : 0);
  free(b);
}

Test(disk, geometry_getters)
{
  struct ploop_disk *disk = open_rw();
  cr_assert_eq(ploop_disk_size(disk), DISK_SIZE);
  cr_assert_eq(ploop_disk_cluster_size(disk), CL);
  cr_assert_eq(ploop_disk_readonly(disk), false);
  cr_assert_eq(ploop_disk_depth(disk), 1);
  char real[PATH_MAX];
  cr_assert(realpath(test_dir, real));
  cr_assert_str_eq(ploop_disk_dir(disk), real);
  OK(ploop_disk_close(disk));
}

Test(disk, fresh_disk_reads_zeros)
{
  struct ploop_disk *disk = open_rw();
  expect_zeros(disk, 0, DISK_SIZE);
  OK(ploop_disk_close(disk));
  cr_assert_eq(file_size(tpath("root.hds")), CL, "reading must not allocate");
}

Test(disk, aligned_write_reads_back_and_lands_in_the_file)
{
  struct ploop_disk *disk = open_rw();
  uint8_t *b = xaligned(8192);
  fill_pattern(b, 8192, 1, 5 * CL + 4096);
  OK(ploop_disk_pwrite(disk, b, 8192, 5 * CL + 4096, 0));
  expect_pattern(disk, 1, 5 * CL + 4096, 8192);
  expect_zeros(disk, 5 * CL, 4096);
  expect_zeros(disk, 5 * CL + 12288, CL - 12288);
  OK(ploop_disk_close(disk));

  /* Independently of the library: BAT[5] points at the first appended cluster
   * (v2 entries count clusters) and the bytes are there. */
  const char *p = tpath("root.hds");
  uint32_t e = raw_le32(p, BAT0 + 4 * 5);
  cr_assert_eq(e, 1, "first allocation is appended right after the header cluster");
  uint8_t got[8192];
  raw_pread(p, got, sizeof got, (off_t)e * CL + 4096);
  cr_assert_eq(check_pattern(got, sizeof got, 1, 5 * CL + 4096), -1, "data not at BAT target");
  for (int i = 0; i < 256; i++)
    if (i != 5)
      cr_assert_eq(raw_le32(p, BAT0 + 4 * i), 0, "BAT[%d] unexpectedly set", i);
  cr_assert_eq(file_size(p), 2 * CL);
  free(b);
}

Test(disk, unaligned_buffers_offsets_and_lengths)
{
  struct ploop_disk *disk = open_rw();
  static const struct {
    uint64_t off;
    size_t len;
  } cases[] = {{777, 3001},
               {1, 1},
               {511, 2},
               {CL - 3, 7},
               {3 * CL + 100, 2 * CL + 5},
               {DISK_SIZE - 1, 1},
               {DISK_SIZE - 1025, 513}};
  uint8_t *raw = malloc(3 * CL + 64);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t *b = raw + 1 + i; /* deliberately misaligned buffer */
    fill_pattern(b, cases[i].len, 100 + i, cases[i].off);
    OK(ploop_disk_pwrite(disk, b, cases[i].len, cases[i].off, 0));
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t *b = raw + 3 + i;
    memset(b, 0, cases[i].len);
    OK(ploop_disk_pread(disk, b, cases[i].len, cases[i].off));
    long bad = check_pattern(b, cases[i].len, 100 + i, cases[i].off);
    cr_assert_eq(bad, -1, "case %zu (off %llu len %zu): byte %ld wrong", i, (unsigned long long)cases[i].off,
                 cases[i].len, bad);
  }
  /* Neighbours of the small writes are untouched (a read-modify-write bug
   * would smear them). */
  expect_zeros(disk, 0, 1);
  expect_zeros(disk, 2, 509);
  expect_zeros(disk, 513, 264);
  expect_zeros(disk, 777 + 3001, CL - 3 - 777 - 3001);
  expect_zeros(disk, 3 * CL, 100);
  free(raw);
  OK(ploop_disk_close(disk));
}

Test(disk, cross_cluster_write_spans_three_clusters)
{
  struct ploop_disk *disk = open_rw();
  uint64_t off = 10 * CL - 1000;
  size_t len = CL + 2000; /* touches clusters 9, 10, 11 */
  put(disk, 9, off, len);
  expect_pattern(disk, 9, off, len);
  expect_zeros(disk, 9 * CL, CL - 1000);
  expect_zeros(disk, 11 * CL + 1000, CL - 1000);
  cr_assert_eq(depth_at(disk, 9 * CL), 1);
  cr_assert_eq(depth_at(disk, 11 * CL), 1);
  cr_assert_eq(depth_at(disk, 12 * CL), 0);
  OK(ploop_disk_close(disk));
  cr_assert_eq(file_size(tpath("root.hds")), 4 * CL);
}

Test(disk, allocation_happens_once_per_cluster)
{
  struct ploop_disk *disk = open_rw();
  const char *p = tpath("root.hds");
  put(disk, 1, 7 * CL, 512);
  OK(ploop_disk_flush(disk));
  cr_assert_eq(file_size(p), 2 * CL, "first write into a cluster appends one cluster");
  put(disk, 2, 7 * CL + 4096, 512);
  put(disk, 3, 7 * CL + CL - 512, 512);
  OK(ploop_disk_flush(disk));
  cr_assert_eq(file_size(p), 2 * CL, "further writes into it must not allocate");
  put(disk, 4, 0, 512);
  OK(ploop_disk_flush(disk));
  cr_assert_eq(file_size(p), 3 * CL);
  cr_assert_eq(raw_le32(p, BAT0 + 4 * 7), 1, "after flush the BAT entry is on disk");
  cr_assert_eq(raw_le32(p, BAT0), 2);
  OK(ploop_disk_close(disk));
}

Test(disk, data_survives_close_and_reopen)
{
  struct ploop_disk *disk = open_rw();
  put(disk, 5, 123456, 70000);
  OK(ploop_disk_close(disk));
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  cr_assert(ploop_disk_readonly(disk));
  expect_pattern(disk, 5, 123456, 70000);
  uint8_t b[512] = {1};
  cr_assert_eq(ploop_disk_pwrite(disk, b, 512, 0, 0), -1, "read-only disk accepted a write");
  OK(ploop_disk_close(disk));
}

Test(disk, out_of_range_io_is_refused)
{
  struct ploop_disk *disk = open_rw();
  uint8_t b[1024] = {0};
  cr_assert_eq(ploop_disk_pread(disk, b, 1024, DISK_SIZE - 512), -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM);
  cr_assert_eq(ploop_disk_pwrite(disk, b, 1, DISK_SIZE, 0), -1);
  cr_assert_eq(ploop_disk_pwrite(disk, b, 1024, UINT64_MAX - 100, 0), -1, "offset overflow");
  cr_assert_eq(ploop_disk_discard(disk, DISK_SIZE - CL, 2 * CL), -1);
  OK(ploop_disk_pread(disk, b, 0, DISK_SIZE)); /* empty I/O at the end is fine */
  OK(ploop_disk_close(disk));
  cr_assert_eq(file_size(tpath("root.hds")), CL, "refused I/O must not allocate");
}

Test(disk, discard_whole_clusters_reads_zeros_and_frees)
{
  struct ploop_disk *disk = open_rw();
  put(disk, 1, 0, 6 * CL);
  OK(ploop_disk_discard(disk, 2 * CL, 2 * CL));
  expect_pattern(disk, 1, 0, 2 * CL);
  expect_zeros(disk, 2 * CL, 2 * CL);
  expect_pattern(disk, 1, 4 * CL, 2 * CL);
  cr_assert_eq(depth_at(disk, 2 * CL), 0, "discarded cluster should be a hole");
  cr_assert_eq(depth_at(disk, 3 * CL), 0);
  cr_assert_eq(depth_at(disk, 4 * CL), 1);
  OK(ploop_disk_close(disk));
  const char *p = tpath("root.hds");
  cr_assert_eq(raw_le32(p, BAT0 + 8), 0, "BAT entry of a discarded cluster must be 0");
  cr_assert_eq(raw_le32(p, BAT0 + 12), 0);
  cr_assert_neq(raw_le32(p, BAT0 + 16), 0);
}

Test(disk, discard_partial_cluster_zeroes_only_the_range)
{
  struct ploop_disk *disk = open_rw();
  put(disk, 2, 0, 2 * CL);
  OK(ploop_disk_discard(disk, 1000, 5000));
  expect_pattern(disk, 2, 0, 1000);
  expect_zeros(disk, 1000, 5000);
  expect_pattern(disk, 2, 6000, 2 * CL - 6000);
  OK(ploop_disk_close(disk));
}

Test(disk, discarded_cluster_can_be_written_again)
{
  struct ploop_disk *disk = open_rw();
  put(disk, 3, 4 * CL, CL);
  OK(ploop_disk_discard(disk, 4 * CL, CL));
  put(disk, 4, 4 * CL + 512, 512);
  expect_zeros(disk, 4 * CL, 512);
  expect_pattern(disk, 4, 4 * CL + 512, 512);
  expect_zeros(disk, 4 * CL + 1024, CL - 1024);
  OK(ploop_disk_close(disk));
}

Test(disk, write_zeroes_punches_or_keeps_allocation)
{
  struct ploop_disk *disk = open_rw();
  put(disk, 6, 0, 4 * CL);
  OK(ploop_disk_write_zeroes(disk, 0, CL, 0));
  OK(ploop_disk_write_zeroes(disk, CL, CL, PLOOP_ZERO_NO_HOLE));
  OK(ploop_disk_write_zeroes(disk, 2 * CL + 10, 20, 0));
  expect_zeros(disk, 0, 2 * CL);
  expect_pattern(disk, 6, 2 * CL, 10);
  expect_zeros(disk, 2 * CL + 10, 20);
  expect_pattern(disk, 6, 2 * CL + 30, 2 * CL - 30);
  cr_assert_eq(depth_at(disk, CL), 1, "NO_HOLE must keep the cluster allocated");
  /* Zeroing a hole must not allocate. */
  OK(ploop_disk_write_zeroes(disk, 100 * CL, 3 * CL, 0));
  expect_zeros(disk, 100 * CL, 3 * CL);
  cr_assert_eq(depth_at(disk, 101 * CL), 0, "zeroing a hole allocated it");
  OK(ploop_disk_close(disk));
}

Test(disk, block_status_reports_depths_and_covers_range)
{
  struct ploop_disk *disk = open_rw();
  put(disk, 1, 0, CL);
  put(disk, 1, 2 * CL, 2 * CL);
  struct ploop_extent ext[64];
  int n = ploop_disk_block_status(disk, 0, 8 * CL, ext, 64);
  cr_assert_geq(n, 3, "%s", ploop_get_error());
  /* Extents must tile [0, 8 CL) in order, with the right depth everywhere. */
  uint64_t pos = 0;
  for (int i = 0; i < n; i++) {
    cr_assert_eq(ext[i].offset, pos, "extent %d starts at %llu, want %llu", i,
                 (unsigned long long)ext[i].offset, (unsigned long long)pos);
    cr_assert_gt(ext[i].length, 0);
    for (uint64_t c = ext[i].offset / CL; c < (ext[i].offset + ext[i].length) / CL; c++) {
      unsigned want = (c == 0 || c == 2 || c == 3) ? 1 : 0;
      cr_assert_eq(ext[i].depth, want, "cluster %llu: depth %u, want %u", (unsigned long long)c, ext[i].depth,
                   want);
    }
    pos += ext[i].length;
  }
  cr_assert_geq(pos, 8 * CL, "extents stop at %llu", (unsigned long long)pos);
  /* MAX limits the output. */
  n = ploop_disk_block_status(disk, 0, 8 * CL, ext, 1);
  cr_assert_eq(n, 1);
  cr_assert_eq(ext[0].length, CL);
  /* A range starting mid-cluster starts there. */
  n = ploop_disk_block_status(disk, CL + 100, 10, ext, 4);
  cr_assert_geq(n, 1);
  cr_assert_eq(ext[0].offset, CL + 100);
  cr_assert_eq(ext[0].depth, 0);
  OK(ploop_disk_close(disk));
}

Test(disk, fua_write_is_durable_in_the_file)
{
  struct ploop_disk *disk = open_rw();
  uint8_t b[4096];
  fill_pattern(b, sizeof b, 8, 20 * CL);
  OK(ploop_disk_pwrite(disk, b, sizeof b, 20 * CL, PLOOP_WRITE_FUA));
  /* Without closing: the BAT entry and data must already be in the file. */
  const char *p = tpath("root.hds");
  uint32_t e = raw_le32(p, BAT0 + 4 * 20);
  cr_assert_neq(e, 0, "FUA write returned before its BAT entry was written");
  uint8_t got[4096];
  raw_pread(p, got, sizeof got, (off_t)e * CL);
  cr_assert_eq(check_pattern(got, sizeof got, 8, 20 * CL), -1);
  OK(ploop_disk_close(disk));
}

Test(disk, dirty_tracking)
{
  struct ploop_disk *disk = open_rw();
  put(disk, 1, 0, 512); /* before start: not tracked */
  OK(ploop_disk_dirty_start(disk));
  put(disk, 1, 3 * CL + 5, 10);
  put(disk, 1, 5 * CL - 1, 2); /* straddles clusters 4 and 5 */
  OK(ploop_disk_discard(disk, 200 * CL, CL));
  uint8_t bm[DISK_SIZE / CL / 8];
  OK(ploop_disk_dirty_get(disk, bm, sizeof bm, true));
  uint8_t want[sizeof bm] = {0};
  want[0] = (1 << 3) | (1 << 4) | (1 << 5);
  want[200 / 8] |= 1 << (200 % 8);
  cr_assert_arr_eq(bm, want, sizeof bm, "dirty bitmap: byte0=0x%02x byte25=0x%02x", bm[0], bm[25]);
  OK(ploop_disk_dirty_get(disk, bm, sizeof bm, false));
  cr_assert_eq(first_nonzero(bm, sizeof bm), -1, "CLEAR did not reset the bitmap");
  put(disk, 1, 255 * CL, 1);
  OK(ploop_disk_dirty_get(disk, bm, sizeof bm, false));
  cr_assert_eq(bm[31], 0x80);
  OK(ploop_disk_dirty_get(disk, bm, sizeof bm, false));
  cr_assert_eq(bm[31], 0x80, "get without CLEAR must not reset");
  OK(ploop_disk_dirty_stop(disk));
  OK(ploop_disk_close(disk));
}

struct writer_arg {
  struct ploop_disk *disk;
  uint32_t first;
};

static void *writer(void *arg)
{
  struct writer_arg *a = arg;
  uint8_t *b = malloc(CL);
  for (uint32_t c = a->first; c < 128; c += 4) {
    fill_pattern(b, CL, 77, (uint64_t)c * CL);
    if (ploop_disk_pwrite(a->disk, b + 3, CL - 7, (uint64_t)c * CL + 3, 0) < 0)
      return (void *)1;
  }
  free(b);
  return NULL;
}

Test(disk, concurrent_writers_allocate_distinct_clusters)
{
  struct ploop_disk *disk = open_rw();
  pthread_t t[4];
  struct writer_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (struct writer_arg){disk, (uint32_t)i};
    cr_assert_eq(pthread_create(&t[i], NULL, writer, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    cr_assert_null(r, "writer %d failed: %s", i, ploop_get_error());
  }
  OK(ploop_disk_flush(disk));
  for (uint32_t c = 0; c < 128; c++) {
    expect_zeros(disk, (uint64_t)c * CL, 3);
    expect_pattern(disk, 77, (uint64_t)c * CL + 3, CL - 7);
  }
  OK(ploop_disk_close(disk));
  const char *p = tpath("root.hds");
  cr_assert_eq(file_size(p), 129 * CL, "128 clusters written, 128 appended");
  /* Every BAT entry distinct and in range. */
  uint8_t seen[129] = {0};
  for (int i = 0; i < 128; i++) {
    uint32_t e = raw_le32(p, BAT0 + 4 * i);
    cr_assert(e >= 1 && e <= 128, "BAT[%d]=%u", i, e);
    cr_assert_eq(seen[e]++, 0, "file cluster %u used twice", e);
  }
  struct ploop_check_report r;
  cr_assert_eq(ploop_delta_check(p, PLOOP_CHECK_FORCE, &r), 0);
}

Test(disk, second_rdwr_open_is_refused)
{
  struct ploop_disk *disk = open_rw();
  struct ploop_disk *again = ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR);
  cr_assert_null(again, "two writers on one disk");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_BUSY, "status %d (%s)", ploop_get_status(), ploop_get_error());
  OK(ploop_disk_close(disk));
  again = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  OK(ploop_disk_close(again));
}

Test(disk, qemu_reads_what_we_wrote)
{
  if (!have_cmd("qemu-img"))
    cr_skip_test("qemu-img not installed");
  struct ploop_disk *disk = open_rw();
  put(disk, 11, 3 * CL + 17, 5 * CL);
  put(disk, 12, DISK_SIZE - 4096, 4096);
  OK(ploop_disk_close(disk));
  const char *raw = tpath("out.raw");
  char cmd[3 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "qemu-img convert -f parallels -O raw %s %s", tpath("root.hds"), raw);
  cr_assert_eq(system(cmd), 0, "qemu-img could not read our image");
  cr_assert_eq(file_size(raw), DISK_SIZE);
  uint8_t *b = malloc(DISK_SIZE);
  raw_pread(raw, b, DISK_SIZE, 0);
  cr_assert_eq(first_nonzero(b, 3 * CL + 17), -1);
  cr_assert_eq(check_pattern(b + 3 * CL + 17, 5 * CL, 11, 3 * CL + 17), -1);
  cr_assert_eq(check_pattern(b + DISK_SIZE - 4096, 4096, 12, DISK_SIZE - 4096), -1);
  free(b);
}

Test(disk, reads_what_qemu_wrote)
{
  if (!have_cmd("qemu-img") || !have_cmd("qemu-io"))
    cr_skip_test("qemu-img/qemu-io not installed");
  const char *p = tpath("root.hds");
  char cmd[3 * PATH_MAX];
  snprintf(cmd, sizeof cmd,
           "qemu-img create -q -f parallels -o cluster_size=32K %s 8M && "
           "qemu-io -c 'write -q -P 0x61 100000 70000' -c 'write -q -P 0x62 8323072 65536' %s",
           p, p);
  cr_assert_eq(system(cmd), 0);
  /* A descriptor around the foreign image. */
  char xml[4096];
  snprintf(xml, sizeof xml,
           "<?xml version=\"1.0\"?>\n<Parallels_disk_image>\n<Disk_Parameters>\n"
           "<Disk_size>16384</Disk_size>\n<Cylinders>32</Cylinders>\n<Heads>16</Heads>\n"
           "<Sectors>32</Sectors>\n<Padding>0</Padding>\n</Disk_Parameters>\n<StorageData>\n"
           "<Storage>\n<Start>0</Start>\n<End>16384</End>\n<Blocksize>64</Blocksize>\n"
           "<Image>\n<GUID>%s</GUID>\n<Type>Compressed</Type>\n<File>root.hds</File>\n"
           "</Image>\n</Storage>\n</StorageData>\n<Snapshots>\n<TopGUID>%s</TopGUID>\n"
           "<Shot>\n<GUID>%s</GUID>\n<ParentGUID>%s</ParentGUID>\n</Shot>\n</Snapshots>\n"
           "</Parallels_disk_image>\n",
           PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_NULL_GUID);
  write_text(tpath("DiskDescriptor.xml"), xml);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  uint8_t *b = malloc(DISK_SIZE);
  OK(ploop_disk_pread(disk, b, DISK_SIZE, 0));
  for (size_t i = 0; i < DISK_SIZE; i++) {
    uint8_t want = (i >= 100000 && i < 170000) ? 0x61 : (i >= 8323072) ? 0x62 : 0;
    cr_assert_eq(b[i], want, "byte %zu: 0x%02x want 0x%02x", i, b[i], want);
  }
  free(b);
  OK(ploop_disk_close(disk));
}

Test(disk, v1_image_reads_through_sector_entries)
{
  /* Hand-built v1 delta: 1 MiB clusters, virtual cluster 2 at file cluster 1
   * (entry 2048 sectors), virtual cluster 0 at file cluster 2 (entry 4096). */
  const char *p = tpath("root.hds");
  struct ploop_delta_create_params prm = {4 << 20, 2048, 1};
  OK(ploop_delta_create(p, &prm));
  static uint8_t data[2 << 20];
  fill_pattern(data, 1 << 20, 21, 2 << 20);
  fill_pattern(data + (1 << 20), 1 << 20, 21, 0);
  raw_pwrite(p, data, sizeof data, 1 << 20);
  raw_put_le32(p, BAT0 + 8, 2048);
  raw_put_le32(p, BAT0 + 0, 4096);
  char xml[4096];
  snprintf(xml, sizeof xml,
           "<?xml version=\"1.0\"?>\n<Parallels_disk_image><Disk_Parameters>"
           "<Disk_size>8192</Disk_size><Cylinders>8</Cylinders><Heads>16</Heads>"
           "<Sectors>63</Sectors><Padding>0</Padding></Disk_Parameters><StorageData><Storage>"
           "<Start>0</Start><End>8192</End><Blocksize>2048</Blocksize><Image><GUID>%s</GUID>"
           "<Type>Compressed</Type><File>root.hds</File></Image></Storage></StorageData>"
           "<Snapshots><TopGUID>%s</TopGUID><Shot><GUID>%s</GUID><ParentGUID>%s</ParentGUID>"
           "</Shot></Snapshots></Parallels_disk_image>\n",
           PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_NULL_GUID);
  write_text(tpath("DiskDescriptor.xml"), xml);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  expect_pattern(disk, 21, 0, 1 << 20);
  expect_zeros(disk, 1 << 20, 1 << 20);
  expect_pattern(disk, 21, 2 << 20, 1 << 20);
  expect_zeros(disk, 3 << 20, 1 << 20);
  OK(ploop_disk_close(disk));
}

Test(disk, qemu_image_with_partial_last_cluster)
{
  /* qemu rounds the size to a sector, not a cluster: 1000000 B -> 1000448 B
   * in 16 clusters of 64 KiB. Reads and writes must stop at the real end. */
  if (!have_cmd("qemu-img") || !have_cmd("qemu-io"))
    cr_skip_test("qemu-img/qemu-io not installed");
  const char *p = tpath("root.hds");
  char cmd[3 * PATH_MAX];
  snprintf(cmd, sizeof cmd,
           "qemu-img create -q -f parallels -o cluster_size=64K %s 1000000 && "
           "qemu-io -c 'write -q -P 0x33 999936 512' %s",
           p, p);
  cr_assert_eq(system(cmd), 0);
  char xml[4096];
  snprintf(xml, sizeof xml,
           "<?xml version=\"1.0\"?>\n<Parallels_disk_image><Disk_Parameters>"
           "<Disk_size>1954</Disk_size><Cylinders>1</Cylinders><Heads>16</Heads>"
           "<Sectors>63</Sectors><Padding>0</Padding></Disk_Parameters><StorageData><Storage>"
           "<Start>0</Start><End>1954</End><Blocksize>128</Blocksize><Image><GUID>%s</GUID>"
           "<Type>Compressed</Type><File>root.hds</File></Image></Storage></StorageData>"
           "<Snapshots><TopGUID>%s</TopGUID><Shot><GUID>%s</GUID><ParentGUID>%s</ParentGUID>"
           "</Shot></Snapshots></Parallels_disk_image>\n",
           PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_NULL_GUID);
  write_text(tpath("DiskDescriptor.xml"), xml);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  cr_assert_eq(ploop_disk_size(disk), 1000448);
  uint8_t b[512];
  OK(ploop_disk_pread(disk, b, 512, 999936));
  for (int i = 0; i < 512; i++)
    cr_assert_eq(b[i], 0x33);
  cr_assert_eq(ploop_disk_pread(disk, b, 512, 1000448), -1, "read past the real end");
  cr_assert_eq(ploop_disk_pwrite(disk, b, 1, 1000448, 0), -1, "write past the real end");
  memset(b, 0x44, sizeof b);
  OK(ploop_disk_pwrite(disk, b, 100, 1000448 - 100, 0));
  OK(ploop_disk_pwrite(disk, b, 512, 0, 0));
  OK(ploop_disk_close(disk));
  /* qemu still reads it and finds it consistent. */
  snprintf(cmd, sizeof cmd,
           "qemu-img check -q -f parallels %s && "
           "qemu-io -c 'read -q -P 0x44 0 512' -c 'read -q -P 0x33 999936 412' "
           "-c 'read -q -P 0x44 1000348 100' %s",
           p, p);
  cr_assert_eq(system(cmd), 0, "qemu disagrees with what we wrote");
}

Test(disk, qemu_img_check_accepts_our_image)
{
  if (!have_cmd("qemu-img"))
    cr_skip_test("qemu-img not installed");
  struct ploop_disk *disk = open_rw();
  /* Random-ish writes, including partial and cross-cluster ones. */
  for (uint32_t i = 0; i < 60; i++) {
    uint64_t off = (pattern_byte(i, 0) * 65537ull + i * 7919ull) % (DISK_SIZE - 70000);
    size_t len = 1 + (pattern_byte(i, 1) * 263u) % 70000;
    put(disk, i, off, len);
  }
  OK(ploop_disk_close(disk));
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "qemu-img check -q -f parallels %s", tpath("root.hds"));
  cr_assert_eq(system(cmd), 0, "qemu-img check found problems (leaks or corruption)");
}

Test(disk, dirty_get_refuses_a_short_bitmap)
{
  /* A bitmap too small for the disk would silently drop dirty clusters past
   * its end, and with CLEAR lose them for good: a migration would miss them. */
  struct ploop_disk *disk = open_rw();
  OK(ploop_disk_dirty_start(disk));
  put(disk, 1, 255 * CL, 1);
  uint8_t bm[DISK_SIZE / CL / 8];
  cr_assert_eq(ploop_disk_dirty_get(disk, bm, sizeof bm - 1, true), -1,
               "a bitmap one byte short was accepted");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM);
  OK(ploop_disk_dirty_get(disk, bm, sizeof bm, false));
  cr_assert_eq(bm[31], 0x80, "the refused call must not have cleared the bitmap");
  OK(ploop_disk_close(disk));
}

Test(disk, dirty_tracking_follows_an_online_grow)
{
  struct ploop_disk *disk = open_rw();
  OK(ploop_disk_dirty_start(disk));
  put(disk, 1, 0, 1);
  OK(ploop_disk_resize(disk, 2 * DISK_SIZE, 0));
  put(disk, 2, 2 * DISK_SIZE - 1, 1); /* the last cluster of the grown disk */
  uint8_t bm[2 * DISK_SIZE / CL / 8];
  OK(ploop_disk_dirty_get(disk, bm, sizeof bm, true));
  cr_assert_eq(bm[0], 0x01, "cluster 0 written before the grow");
  cr_assert_eq(bm[sizeof bm - 1], 0x80, "cluster written in the grown part is not tracked");
  OK(ploop_disk_close(disk));
}
