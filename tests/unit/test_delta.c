/* Unit tests for single delta files: create/open/info, the header bytes on disk
 * (read back with plain pread, not through the library), the in-use mark, v1
 * images, and refusal of malformed headers and BATs. */
#include "helpers.h"

/* Header field offsets, from formats/ploop-v2.md (not from the library). */
enum {
  H_SIG = 0,
  H_TYPE = 16,
  H_HEADS = 20,
  H_CYL = 24,
  H_CLUSTER = 28,
  H_BAT_ENTRIES = 32,
  H_SIZE = 36,
  H_IN_USE = 44,
  H_FIRST_BLOCK = 48,
  H_FLAGS = 52,
  H_EXT = 56,
  BAT0 = 64,
};
#define IN_USE_MARK 0x746F6E59u
#define CIF_EMPTY 1u

TestSuite(delta, .init = tmpdir_setup, .fini = tmpdir_teardown);

static const char *create(uint64_t size, uint32_t cluster_sectors, int version)
{
  const char *p = tpath("d%d-%llu-%u.hds", version, (unsigned long long)size, cluster_sectors);
  struct ploop_delta_create_params prm = {size, cluster_sectors, version};
  OK(ploop_delta_create(p, &prm));
  return p;
}

/* Expects ploop_delta_open(PATH) to fail as corrupt, naming the file. */
static void expect_corrupt(const char *path, const char *why)
{
  struct ploop_delta *d = ploop_delta_open(path, PLOOP_OPEN_RDONLY);
  cr_assert_null(d, "%s: open should fail", why);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_CORRUPT, "%s: status %d, want CORRUPT (%s)", why,
               ploop_get_status(), ploop_get_error());
  ERROR_NAMES(base_name(path));
  d = ploop_delta_open(path, PLOOP_OPEN_RDWR);
  cr_assert_null(d, "%s: read-write open should fail too", why);
}

Test(delta, create_default_header_is_byte_exact)
{
  const char *p = create(10ull << 30, 0, 0);
  char sig[16];
  raw_pread(p, sig, 16, H_SIG);
  cr_assert(memcmp(sig, "WithouFreSpacExt", 16) == 0, "v2 signature expected");
  cr_assert_eq(raw_le32(p, H_TYPE), 2);
  cr_assert_eq(raw_le32(p, H_CLUSTER), 2048, "default cluster is 2048 sectors");
  cr_assert_eq(raw_le32(p, H_BAT_ENTRIES), 10240);
  cr_assert_eq(raw_le64(p, H_SIZE), 20971520ull);
  cr_assert_eq(raw_le32(p, H_IN_USE), 0, "a closed delta has no in-use mark");
  cr_assert_eq(raw_le32(p, H_FIRST_BLOCK), 2048, "BAT of 10240 entries fits one 1 MiB cluster");
  cr_assert_eq(raw_le32(p, H_FLAGS), CIF_EMPTY, "new delta carries CIF_Empty");
  cr_assert_eq(raw_le64(p, H_EXT), 0);
  /* Size > 16777216 sectors: ploop's CHS rule gives 32 s/t, 16 heads. */
  cr_assert_eq(raw_le32(p, H_HEADS), 16);
  cr_assert_eq(raw_le32(p, H_CYL), 20971520 / 32 / 16);
  cr_assert_eq(file_size(p), 1 << 20, "file is exactly the header cluster");
  static uint8_t bat[(1 << 20) - 64];
  raw_pread(p, bat, sizeof bat, BAT0);
  cr_assert_eq(first_nonzero(bat, sizeof bat), -1, "BAT and padding must be zero");
}

Test(delta, geometry_follows_ploop_chs_rule_in_ata_range)
{
  /* 1 GiB = 2097152 sectors, inside (1032192, 16777216): 16 heads x 63 s/t. */
  const char *p = create(1ull << 30, 0, 2);
  cr_assert_eq(raw_le32(p, H_HEADS), 16);
  cr_assert_eq(raw_le32(p, H_CYL), 2097152 / (16 * 63));
}

Test(delta, size_is_rounded_up_to_a_cluster)
{
  const char *p = create(1000000, 128, 2); /* 64 KiB clusters */
  cr_assert_eq(raw_le32(p, H_CLUSTER), 128);
  cr_assert_eq(raw_le32(p, H_BAT_ENTRIES), 16);
  cr_assert_eq(raw_le64(p, H_SIZE), 2048, "1000000 B rounds up to 16 x 64 KiB");
  cr_assert_eq(raw_le32(p, H_FIRST_BLOCK), 128);
  cr_assert_eq(file_size(p), 65536);
}

Test(delta, multi_cluster_bat)
{
  /* 2 GiB at 64 KiB = 32768 entries = 131136 bytes: 3 clusters of header. */
  const char *p = create(2ull << 30, 128, 2);
  cr_assert_eq(raw_le32(p, H_BAT_ENTRIES), 32768);
  cr_assert_eq(raw_le32(p, H_FIRST_BLOCK), 3 * 128);
  cr_assert_eq(file_size(p), 3 * 65536);
  cr_assert_eq(file_size(p) % 65536, 0, "file must be whole clusters");
}

Test(delta, info_matches_header)
{
  const char *p = create(64ull << 20, 64, 2); /* 32 KiB clusters */
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  memset(&in, 0xff, sizeof in);
  OK(ploop_delta_get_info(d, &in));
  cr_assert_eq(in.version, 2);
  cr_assert_eq(in.cluster_sectors, 64);
  cr_assert_eq(in.cluster_bytes, 32768);
  cr_assert_eq(in.virtual_bytes, 64ull << 20);
  cr_assert_eq(in.bat_entries, 2048);
  cr_assert_eq(in.first_block_sectors, 64 * ((64 + 4 * 2048 + 32767) / 32768));
  cr_assert_eq(in.allocated_clusters, 0);
  cr_assert_eq(in.file_bytes, (uint64_t)file_size(p));
  cr_assert_eq(in.in_use, false);
  cr_assert_eq(in.flags, CIF_EMPTY);
  cr_assert_str_eq(ploop_delta_path(d), p);
  OK(ploop_delta_close(d));
}

Test(delta, create_refuses_existing_file)
{
  const char *p = create(1 << 20, 64, 2);
  uint8_t before[64], after[64];
  raw_pread(p, before, 64, 0);
  struct ploop_delta_create_params prm = {2 << 20, 128, 2};
  cr_assert_eq(ploop_delta_create(p, &prm), -1, "must not overwrite an existing delta");
  ERROR_NAMES(base_name(p));
  raw_pread(p, after, 64, 0);
  cr_assert_arr_eq(before, after, 64, "existing file was modified");
}

Test(delta, create_rejects_bad_parameters)
{
  static const struct {
    uint64_t size;
    uint32_t cl;
    int version;
    const char *why;
  } bad[] = {
      {1 << 20, 100, 2, "cluster not a power of two"},
      {1 << 20, 32, 2, "cluster below 32 KiB"},
      {1 << 20, 262144, 2, "cluster above 64 MiB"},
      {0, 0, 2, "zero size"},
      {1 << 20, 0, 3, "unknown version"},
      {3ull << 40, 0, 1, "v1 limited to 2 TiB"},
      {51ull << 40, 0, 2, "over the 50 TiB limit"},
      {(8ull << 40) + (32 << 10), 64, 2, "over 2^28 BAT entries (32 KiB clusters past 8 TiB)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *p = tpath("bad%zu.hds", i);
    struct ploop_delta_create_params prm = {bad[i].size, bad[i].cl, bad[i].version};
    cr_assert_eq(ploop_delta_create(p, &prm), -1, "%s: should be rejected", bad[i].why);
    cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM, "%s: status %d (%s)", bad[i].why, ploop_get_status(),
                 ploop_get_error());
    cr_assert(!file_exists(p), "%s: a rejected create left %s behind", bad[i].why, p);
  }
}

Test(delta, cluster_size_limits_are_accepted)
{
  const char *lo = create(1 << 20, 64, 2);
  const char *hi = create(128ull << 20, 131072, 2);
  cr_assert_eq(raw_le32(lo, H_CLUSTER), 64);
  cr_assert_eq(raw_le32(hi, H_CLUSTER), 131072);
  cr_assert_eq(file_size(hi), 64 << 20);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(hi, PLOOP_OPEN_RDONLY));
  OK(ploop_delta_close(d));
}

Test(delta, in_use_mark_set_while_open_rdwr_and_cleared_on_close)
{
  const char *p = create(4 << 20, 64, 2);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDWR));
  cr_assert_eq(raw_le32(p, H_IN_USE), IN_USE_MARK, "in-use mark must be on disk while open");
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(d, &in));
  cr_assert(in.in_use);
  OK(ploop_delta_close(d));
  cr_assert_eq(raw_le32(p, H_IN_USE), 0, "clean close must clear the mark");
}

Test(delta, readonly_open_does_not_write)
{
  const char *p = create(4 << 20, 64, 2);
  uint8_t before[4096], after[4096];
  raw_pread(p, before, sizeof before, 0);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  raw_pread(p, after, sizeof after, 0);
  cr_assert_arr_eq(before, after, sizeof before, "read-only open changed the header");
  OK(ploop_delta_close(d));
  raw_pread(p, after, sizeof after, 0);
  cr_assert_arr_eq(before, after, sizeof before, "read-only close changed the header");
}

Test(delta, dirty_delta_needs_allow_dirty)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_IN_USE, IN_USE_MARK); /* as left by a crash */
  cr_assert_null(ploop_delta_open(p, PLOOP_OPEN_RDWR), "dirty delta opened without check");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_BUSY, "status %d (%s)", ploop_get_status(), ploop_get_error());
  ERROR_NAMES(base_name(p));
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDWR | PLOOP_OPEN_ALLOW_DIRTY));
  OK(ploop_delta_close(d));
  cr_assert_eq(raw_le32(p, H_IN_USE), 0);
}

Test(delta, closed_v21_mark_is_clean)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_IN_USE, 0x312e3276); /* "v2.1": closed by spec-2.1 software */
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDWR));
  OK(ploop_delta_close(d));
}

Test(delta, v1_create_and_info)
{
  const char *p = create(4 << 20, 0, 1);
  char sig[16];
  raw_pread(p, sig, 16, H_SIG);
  cr_assert(memcmp(sig, "WithoutFreeSpace", 16) == 0, "v1 signature expected");
  cr_assert_eq(raw_le32(p, H_SIZE), 8192);
  cr_assert_eq(raw_le32(p, H_SIZE + 4), 0, "v1 high half of size must be zero");
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(d, &in));
  cr_assert_eq(in.version, 1);
  cr_assert_eq(in.virtual_bytes, 4 << 20);
  OK(ploop_delta_close(d));
}

Test(delta, v1_bat_entries_count_sectors)
{
  /* Hand-made v1 image: 1 MiB clusters, 4 clusters, virtual cluster 2 stored at
   * file cluster 1, i.e. BAT entry 2048 (sectors). */
  const char *p = create(4 << 20, 0, 1);
  static uint8_t data[1 << 20];
  fill_pattern(data, sizeof data, 1, 0);
  raw_pwrite(p, data, sizeof data, 1 << 20);
  raw_put_le32(p, BAT0 + 4 * 2, 2048);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(d, &in));
  cr_assert_eq(in.allocated_clusters, 1, "a v1 entry of 2048 sectors is one valid cluster");
  OK(ploop_delta_close(d));
}

Test(delta, qemu_img_image_opens)
{
  if (!have_cmd("qemu-img"))
    cr_skip_test("qemu-img not installed");
  const char *p = tpath("q.hds");
  char cmd[PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "qemu-img create -q -f parallels -o cluster_size=64K %s 3M", p);
  cr_assert_eq(system(cmd), 0);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(d, &in));
  cr_assert_eq(in.version, 2);
  cr_assert_eq(in.cluster_bytes, 65536);
  cr_assert_eq(in.virtual_bytes, 3 << 20);
  cr_assert_eq(in.bat_entries, 48);
  OK(ploop_delta_close(d));
}

/* ---- malformed headers and BATs ---- */

Test(delta, rejects_bad_signature)
{
  const char *p = create(4 << 20, 64, 2);
  raw_pwrite(p, "WithoutFreeSpacX", 16, H_SIG);
  expect_corrupt(p, "bad signature");
}

Test(delta, rejects_bad_type)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_TYPE, 3);
  expect_corrupt(p, "m_Type 3");
}

Test(delta, rejects_cluster_not_power_of_two)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_CLUSTER, 96);
  expect_corrupt(p, "96-sector cluster");
  raw_put_le32(p, H_CLUSTER, 0);
  expect_corrupt(p, "zero cluster");
}

Test(delta, rejects_cluster_below_32k)
{
  /* A self-consistent 16 KiB-cluster header (4 MiB = 256 entries), so only
   * the cluster size rule can refuse it. */
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_CLUSTER, 32);
  raw_put_le32(p, H_BAT_ENTRIES, 256);
  expect_corrupt(p, "16 KiB cluster");
}

Test(delta, rejects_qemu_non_power_of_two_cluster)
{
  if (!have_cmd("qemu-img"))
    cr_skip_test("qemu-img not installed");
  const char *p = tpath("q100k.hds");
  char cmd[PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "qemu-img create -q -f parallels -o cluster_size=100K %s 1M", p);
  cr_assert_eq(system(cmd), 0);
  expect_corrupt(p, "qemu 100K cluster");
}

Test(delta, rejects_truncated_header)
{
  const char *p = create(4 << 20, 64, 2);
  cr_assert_eq(truncate(p, 40), 0);
  expect_corrupt(p, "40-byte file");
  cr_assert_eq(truncate(p, 0), 0);
  expect_corrupt(p, "empty file");
}

Test(delta, rejects_truncated_bat)
{
  /* 3 header clusters, cut after the first: the BAT is incomplete. */
  const char *p = create(2ull << 30, 128, 2);
  cr_assert_eq(truncate(p, 65536), 0);
  expect_corrupt(p, "BAT cut short");
}

Test(delta, rejects_bat_entry_past_eof)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, BAT0 + 4 * 3, 5); /* file is 1 cluster */
  expect_corrupt(p, "BAT entry past EOF");
}

Test(delta, rejects_bat_entry_into_header_area)
{
  const char *p = create(2ull << 30, 128, 2); /* header area = clusters 0..2 */
  cr_assert_eq(truncate(p, 4 * 65536), 0);
  raw_put_le32(p, BAT0, 1);
  expect_corrupt(p, "BAT entry pointing into the BAT");
}

Test(delta, rejects_duplicate_bat_entries)
{
  const char *p = create(4 << 20, 64, 2);
  cr_assert_eq(truncate(p, 2 * 32768), 0);
  raw_put_le32(p, BAT0 + 0, 1);
  raw_put_le32(p, BAT0 + 4, 1);
  expect_corrupt(p, "two entries for one cluster");
}

Test(delta, rejects_reserved_bat_value)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, BAT0, 0xFFFFFFFFu);
  expect_corrupt(p, "0xFFFFFFFF entry");
}

Test(delta, rejects_misaligned_v1_entry)
{
  const char *p = create(4 << 20, 0, 1);
  cr_assert_eq(truncate(p, 3 << 20), 0);
  raw_put_le32(p, BAT0, 2049); /* 1 MiB clusters: entries must be multiples of 2048 */
  expect_corrupt(p, "misaligned v1 entry");
}

Test(delta, rejects_unknown_in_use_value)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_IN_USE, 0x12345678);
  expect_corrupt(p, "unknown in-use value");
}

Test(delta, rejects_bad_first_block_offset)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_FIRST_BLOCK, 0);
  expect_corrupt(p, "FirstBlockOffset 0");
  raw_put_le32(p, H_FIRST_BLOCK, 65); /* not a multiple of 64 */
  expect_corrupt(p, "unaligned FirstBlockOffset");
}

/* Found by tests/fuzz (fuzz_delta): open allocated and zeroed the whole
 * claimed header area, up to 2 TiB for a 32 KiB file. */
Test(delta, rejects_first_block_past_bat_area)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_FIRST_BLOCK, 128); /* a second, unused header cluster */
  expect_corrupt(p, "FirstBlockOffset past the BAT's cluster");
  raw_put_le32(p, H_FIRST_BLOCK, 0xFFFFFFC0u);
  expect_corrupt(p, "FirstBlockOffset near 2 TiB");
  struct ploop_check_report r;
  cr_assert_eq(ploop_delta_check(p, PLOOP_CHECK_READONLY | PLOOP_CHECK_FORCE, &r), 1);
  cr_assert(r.header_bad);
  cr_assert(strstr(r.header_problem, "past the end of the BAT area"), "%s", r.header_problem);
  raw_put_le32(p, H_FIRST_BLOCK, 64); /* back to what create wrote */
  struct ploop_delta *d = ploop_delta_open(p, PLOOP_OPEN_RDONLY);
  cr_assert_not_null(d, "%s", ploop_get_error());
  OK(ploop_delta_close(d));
}

/* Found by tests/fuzz (fuzz_stream): 2^32 - 1 entries (a sparse file is
 * enough to pass the size check) would be 16 GiB of BAT in memory. */
Test(delta, rejects_bat_over_the_entry_limit)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_BAT_ENTRIES, (1u << 28) + 1);
  expect_corrupt(p, "2^28 + 1 BAT entries");
  struct ploop_check_report r;
  cr_assert_eq(ploop_delta_check(p, PLOOP_CHECK_READONLY | PLOOP_CHECK_FORCE, &r), 1);
  cr_assert(r.header_bad);
  create(8ull << 40, 64, 2); /* exactly 2^28 entries: allowed (sparse; not opened, 1 GiB of BAT) */
}

Test(delta, rejects_bat_larger_than_header_area)
{
  /* 4 MiB at 32 KiB = 128 entries; claim 16384 entries (and a matching size),
   * which do not fit one 32 KiB header cluster. */
  const char *p = create(4 << 20, 64, 2);
  raw_put_le32(p, H_BAT_ENTRIES, 16384);
  raw_put_le64(p, H_SIZE, 16384ull * 64);
  expect_corrupt(p, "BAT overflowing FirstBlockOffset");
}

Test(delta, rejects_size_beyond_bat)
{
  const char *p = create(4 << 20, 64, 2);
  raw_put_le64(p, H_SIZE, 128 * 64 + 64); /* one cluster more than m_Size covers */
  expect_corrupt(p, "m_SizeInSectors beyond m_Size clusters");
  raw_put_le64(p, H_SIZE, 0);
  expect_corrupt(p, "zero size");
}

Test(delta, v1_never_uses_high_size_bits)
{
  const char *p = create(4 << 20, 0, 1);
  raw_put_le32(p, H_SIZE + 4, 1);
  /* Either refuse, or ignore the high half as ploop does: never a 2^32+ disk. */
  struct ploop_delta *d = ploop_delta_open(p, PLOOP_OPEN_RDONLY);
  if (d) {
    struct ploop_delta_info in;
    OK(ploop_delta_get_info(d, &in));
    cr_assert_eq(in.virtual_bytes, 4 << 20, "v1 must use only the low 32 bits of the size");
    ploop_delta_close(d);
  }
}

Test(delta, unaligned_file_size_still_opens)
{
  /* Rule 3 of the format: an interrupted extension leaves a partial cluster;
   * that is not corruption (new clusters start at the size rounded down). */
  const char *p = create(4 << 20, 64, 2);
  cr_assert_eq(truncate(p, 32768 + 1000), 0);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  OK(ploop_delta_close(d));
}

Test(delta, missing_file_is_notfound)
{
  cr_assert_null(ploop_delta_open(tpath("nope.hds"), PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_NOTFOUND, "status %d (%s)", ploop_get_status(),
               ploop_get_error());
  cr_assert_eq(ploop_get_errno(), ENOENT);
  ERROR_NAMES("nope.hds");
}

Test(delta, rejects_entry_to_cluster_cut_short_by_eof)
{
  /* The file ends 1000 bytes into the cluster BAT[0] names: that cluster is
   * not whole, and new allocations would start at it (rule 3), so the entry
   * cannot be valid; reading it as zeros would hide lost data. */
  const char *p = create(4 << 20, 64, 2);
  cr_assert_eq(truncate(p, 2 * 32768 + 1000), 0);
  raw_put_le32(p, BAT0, 2);
  expect_corrupt(p, "entry to a partial cluster");
}

/* ---- test vectors (formats/vectors/) ---- */

/* Rebuilds a file from `xxd -a` text: "OFFSET: hex... ascii" lines, "*" for
 * zero lines skipped; the last line fixes the size. Tests run from the top
 * of the tree, as `make unit` does. */
static const char *materialize(const char *vector, const char *name)
{
  char src[PATH_MAX];
  snprintf(src, sizeof src, "formats/vectors/%s", vector);
  FILE *in = fopen(src, "r");
  cr_assert_not_null(in, "%s: %s (run from the top of the tree)", src, strerror(errno));
  const char *dst = tpath("%s", name);
  int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert(fd >= 0);
  char line[256];
  uint64_t end = 0;
  while (fgets(line, sizeof line, in)) {
    if (line[0] == '*')
      continue;
    char *p = strchr(line, ':');
    cr_assert_not_null(p, "bad line in %s: %s", src, line);
    uint64_t off = strtoull(line, NULL, 16);
    uint8_t bytes[16];
    int n = 0;
    for (p++; n < 16; p += 5) { /* " abcd" groups of two bytes */
      unsigned a, b;
      if (sscanf(p, " %2x%2x", &a, &b) != 2)
        break;
      bytes[n++] = (uint8_t)a;
      bytes[n++] = (uint8_t)b;
    }
    cr_assert_eq(pwrite(fd, bytes, n, (off_t)off), n);
    end = off + n;
  }
  cr_assert_eq(ftruncate(fd, (off_t)end), 0);
  close(fd);
  fclose(in);
  return dst;
}

static void write_single_descriptor(const char *file, uint64_t sectors, uint32_t cluster_sectors)
{
  char xml[2048];
  snprintf(xml, sizeof xml,
           "<?xml version=\"1.0\"?>\n<Parallels_disk_image><Disk_Parameters>"
           "<Disk_size>%llu</Disk_size></Disk_Parameters><StorageData><Storage>"
           "<Start>0</Start><End>%llu</End><Blocksize>%u</Blocksize><Image><GUID>%s</GUID>"
           "<Type>Compressed</Type><File>%s</File></Image></Storage></StorageData>"
           "<Snapshots><TopGUID>%s</TopGUID><Shot><GUID>%s</GUID><ParentGUID>%s</ParentGUID>"
           "</Shot></Snapshots></Parallels_disk_image>\n",
           (unsigned long long)sectors, (unsigned long long)sectors, cluster_sectors, PLOOP_TOP_GUID, file,
           PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_NULL_GUID);
  write_text(tpath("DiskDescriptor.xml"), xml);
}

/* The disk must read FILL at [off, off+len) of each range and zeros elsewhere. */
struct fill {
  uint64_t off, len;
  uint8_t byte;
};
static void expect_contents(uint64_t size, const struct fill *f, size_t n)
{
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_size(disk), size);
  uint8_t *b = malloc(size);
  OK(ploop_disk_pread(disk, b, size, 0));
  for (uint64_t i = 0; i < size; i++) {
    uint8_t want = 0;
    for (size_t k = 0; k < n; k++)
      if (i >= f[k].off && i < f[k].off + f[k].len)
        want = f[k].byte;
    cr_assert_eq(b[i], want, "byte %llu is 0x%02x, want 0x%02x", (unsigned long long)i, b[i], want);
  }
  free(b);
  OK(ploop_disk_close(disk));
}

Test(delta, vector_qemu_parallels_64k)
{
  const char *p = materialize("qemu-parallels-64k.xxd", "root.hds");
  cr_assert_eq(file_size(p), 3 * 65536);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(d, &in));
  cr_assert_eq(in.version, 2);
  cr_assert_eq(in.cluster_bytes, 65536);
  cr_assert_eq(in.bat_entries, 16);
  cr_assert_eq(in.virtual_bytes, 1 << 20);
  cr_assert_eq(in.allocated_clusters, 2);
  cr_assert_eq(in.flags, 0);
  OK(ploop_delta_close(d));
  write_single_descriptor("root.hds", 2048, 128);
  const struct fill f[] = {{0, 512, 0xab}, {131072, 512, 0xcd}};
  expect_contents(1 << 20, f, 2);
}

Test(delta, vector_ploop_v1_1m)
{
  const char *p = materialize("ploop-v1-1m.xxd", "root.hds");
  cr_assert_eq(file_size(p), 2 << 20);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(d, &in));
  cr_assert_eq(in.version, 1);
  cr_assert_eq(in.cluster_sectors, 2048);
  cr_assert_eq(in.bat_entries, 2);
  cr_assert_eq(in.allocated_clusters, 1);
  OK(ploop_delta_close(d));
  write_single_descriptor("root.hds", 4096, 2048);
  const struct fill f[] = {{1 << 20, 512, 0x5a}};
  expect_contents(2 << 20, f, 1);
}
