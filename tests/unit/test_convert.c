/* Unit tests for format conversion: v2 <-> v1 in place (the BAT changes units,
 * checked byte by byte in the file) and ploop1 <-> raw, keeping every byte. */
#include "helpers.h"

#define CL (1u << 20) /* v1 code paths assume 1 MiB clusters */
#define DISK_SIZE (8u << 20)
#define BAT0 64

TestSuite(convert, .init = tmpdir_setup, .fini = tmpdir_teardown);

static uint8_t model[DISK_SIZE];

/* A 1 MiB-cluster disk with data in virtual clusters 1, 2 (partly) and 6. */
static void make_filled_disk(void)
{
  make_disk(DISK_SIZE, CL / 512);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  static uint8_t b[2 * CL];
  fill_pattern(b, 2 * CL, 3, CL);
  OK(ploop_disk_pwrite(disk, b, CL + 5000, CL, 0));
  fill_pattern(model + CL, CL + 5000, 3, CL);
  fill_pattern(b, 4096, 4, 6 * CL + 512);
  OK(ploop_disk_pwrite(disk, b, 4096, 6 * CL + 512, 0));
  fill_pattern(model + 6 * CL + 512, 4096, 4, 6 * CL + 512);
  OK(ploop_disk_close(disk));
}

static void assert_disk_matches_model(const char *what)
{
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_size(disk), DISK_SIZE);
  uint8_t *b = malloc(DISK_SIZE);
  OK(ploop_disk_pread(disk, b, DISK_SIZE, 0));
  for (size_t i = 0; i < DISK_SIZE; i++)
    cr_assert_eq(b[i], model[i], "%s: byte %zu is 0x%02x, want 0x%02x", what, i, b[i], model[i]);
  free(b);
  OK(ploop_disk_close(disk));
}

Test(convert, v2_to_v1_and_back_rewrites_bat_units)
{
  make_filled_disk();
  const char *p = tpath("root.hds");
  uint32_t e1 = raw_le32(p, BAT0 + 4), e2 = raw_le32(p, BAT0 + 8), e6 = raw_le32(p, BAT0 + 24);
  cr_assert(e1 && e2 && e6, "precondition: clusters 1, 2, 6 allocated");
  cr_assert_lt(e1, 16, "v2 entries count clusters");

  OK(ploop_convert_version(test_dir, 1));
  char sig[16];
  raw_pread(p, sig, 16, 0);
  cr_assert(memcmp(sig, "WithoutFreeSpace", 16) == 0, "v1 signature expected after convert");
  cr_assert_eq(raw_le32(p, BAT0 + 4), e1 * 2048, "v1 entries count sectors");
  cr_assert_eq(raw_le32(p, BAT0 + 8), e2 * 2048);
  cr_assert_eq(raw_le32(p, BAT0 + 24), e6 * 2048);
  cr_assert_eq(raw_le32(p, BAT0), 0, "holes stay 0");
  cr_assert_eq(raw_le32(p, 40), 0, "v1 high half of the size must be 0");
  cr_assert_eq(raw_le32(p, 52) & 2, 0, "CIF_FmtVersionConvert left set");
  cr_assert(!file_exists(tpath("root.hds.convert-backup")), "conversion backup left behind");
  assert_disk_matches_model("as v1");

  OK(ploop_convert_version(test_dir, 2));
  raw_pread(p, sig, 16, 0);
  cr_assert(memcmp(sig, "WithouFreSpacExt", 16) == 0);
  cr_assert_eq(raw_le32(p, BAT0 + 4), e1);
  cr_assert_eq(raw_le32(p, BAT0 + 24), e6);
  assert_disk_matches_model("back to v2");
  struct ploop_check_report r;
  cr_assert_eq(ploop_delta_check(p, PLOOP_CHECK_FORCE, &r), 0);
}

Test(convert, same_version_is_a_no_op)
{
  make_filled_disk();
  const char *p = tpath("root.hds");
  uint8_t before[4096], after[4096];
  raw_pread(p, before, sizeof before, 0);
  OK(ploop_convert_version(test_dir, 2));
  raw_pread(p, after, sizeof after, 0);
  cr_assert_arr_eq(before, after, sizeof before);
  cr_assert_eq(ploop_convert_version(test_dir, 3), -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM);
}

Test(convert, interrupted_conversion_is_refused_then_restored_by_check)
{
  /* Simulate a crash between the BAT rewrite and clearing the flag: a backup
   * of the v2 header+BAT exists and the file has the flag set. */
  make_filled_disk();
  const char *p = tpath("root.hds");
  static uint8_t hdr[CL];
  raw_pread(p, hdr, CL, 0);
  write_text(tpath("root.hds.convert-backup"), "");
  raw_pwrite(tpath("root.hds.convert-backup"), hdr, CL, 0);
  raw_put_le32(p, 52, raw_le32(p, 52) | 2);
  raw_put_le32(p, BAT0 + 4, 12345); /* half-converted garbage */
  cr_assert_null(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY),
                 "a delta in the middle of a conversion must not be used");
  char msg[4096] = "";
  int rc = ploop_disk_check(test_dir, PLOOP_CHECK_REPAIR | PLOOP_CHECK_FORCE, msg, sizeof msg);
  cr_assert_eq(rc, 0, "check -F should restore the backup: rc %d: %s / %s", rc, msg, ploop_get_error());
  cr_assert_eq(raw_le32(p, 52) & 2, 0);
  cr_assert(!file_exists(tpath("root.hds.convert-backup")));
  assert_disk_matches_model("after restoring the BAT backup");
}

Test(convert, stale_backup_without_the_mark_is_removed_not_restored)
{
  /* A crash before the backup's fsync can leave it empty or cut short; the
   * image was never marked, so it is whole and the backup must not be
   * copied back over it. */
  make_filled_disk();
  const char *p = tpath("root.hds");
  static uint8_t before[CL], after[CL];
  raw_pread(p, before, CL, 0);
  for (int partial = 0; partial < 2; partial++) {
    write_text(tpath("root.hds.convert-backup"), "");
    if (partial) { /* a BAT page of zeros: restoring it would lose every cluster */
      static uint8_t zeros[4096];
      raw_pwrite(tpath("root.hds.convert-backup"), zeros, sizeof zeros, 0);
    }
    char msg[4096] = "";
    int rc = ploop_disk_check(test_dir, PLOOP_CHECK_REPAIR | PLOOP_CHECK_FORCE, msg, sizeof msg);
    cr_assert_eq(rc, 0, "check -F: rc %d: %s / %s", rc, msg, ploop_get_error());
    cr_assert(!file_exists(tpath("root.hds.convert-backup")), "stale backup left behind");
    raw_pread(p, after, CL, 0);
    cr_assert_arr_eq(before, after, CL, "the header and BAT must not change");
    assert_disk_matches_model("after removing a stale backup");
  }
}

Test(convert, marked_image_with_an_empty_backup_is_a_clear_error)
{
  make_filled_disk();
  const char *p = tpath("root.hds");
  write_text(tpath("root.hds.convert-backup"), "");
  raw_put_le32(p, 52, raw_le32(p, 52) | 2);
  char msg[4096] = "";
  cr_assert_eq(ploop_disk_check(test_dir, PLOOP_CHECK_REPAIR | PLOOP_CHECK_FORCE, msg, sizeof msg), -1);
  cr_assert(strstr(ploop_get_error(), "unusable conversion backup"), "error: %s", ploop_get_error());
  cr_assert(file_exists(tpath("root.hds.convert-backup")), "the evidence must stay");
}

Test(convert, marked_image_without_a_backup_is_not_repaired)
{
  make_filled_disk();
  const char *p = tpath("root.hds");
  raw_put_le32(p, 52, raw_le32(p, 52) | 2);
  static uint8_t before[CL], after[CL];
  raw_pread(p, before, CL, 0);
  char msg[4096] = "";
  cr_assert_eq(ploop_disk_check(test_dir, PLOOP_CHECK_REPAIR | PLOOP_CHECK_FORCE, msg, sizeof msg), 1);
  cr_assert(strstr(msg, "backup (.convert-backup) is missing"), "report: %s", msg);
  raw_pread(p, after, CL, 0);
  cr_assert_arr_eq(before, after, CL, "nothing may change when it cannot be repaired");
}

Test(convert, to_raw_and_back)
{
  make_filled_disk();
  OK(ploop_convert_format(test_dir, true));
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert_eq(d->n_images, 1);
  cr_assert(d->images[0].plain, "image should be Plain after convert to raw");
  char *raw = NOTNULL(ploop_descriptor_image_path(d, &d->images[0]));
  ploop_descriptor_free(d);
  cr_assert_eq(file_size(raw), DISK_SIZE, "a raw image is the virtual disk byte for byte");
  uint8_t *b = malloc(DISK_SIZE);
  raw_pread(raw, b, DISK_SIZE, 0);
  for (size_t i = 0; i < DISK_SIZE; i++)
    cr_assert_eq(b[i], model[i], "raw byte %zu", i);
  free(b);
  cr_assert(!file_exists(tpath("root.hds")), "old ploop1 file should be gone");
  assert_disk_matches_model("raw");

  OK(ploop_convert_format(test_dir, false));
  d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert(!d->images[0].plain);
  char *hds = NOTNULL(ploop_descriptor_image_path(d, &d->images[0]));
  ploop_descriptor_free(d);
  assert_disk_matches_model("back to ploop1");
  /* Only the clusters holding data were allocated (the rest were zeros). */
  struct ploop_delta *dl = NOTNULL(ploop_delta_open(hds, PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(dl, &in));
  cr_assert_eq(in.allocated_clusters, 3, "zero clusters should stay holes, got %llu",
               (unsigned long long)in.allocated_clusters);
  OK(ploop_delta_close(dl));
  cr_assert(!file_exists(raw), "raw file should be gone");
  free(raw);
  free(hds);
}

Test(convert, raw_needs_single_image)
{
  make_filled_disk();
  char g[PLOOP_UUID_LEN + 1];
  OK(ploop_snapshot_create(test_dir, NULL, g));
  cr_assert_eq(ploop_convert_format(test_dir, true), -1, "raw of a stacked disk accepted");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM);
}

Test(convert, refused_conversion_leaves_the_file_unchanged)
{
  make_filled_disk();
  OK(ploop_resize(test_dir, 3ull << 40, 0)); /* v1 is limited to 2 TiB */
  const char *p = tpath("root.hds");
  static uint8_t before[CL], after[CL];
  raw_pread(p, before, CL, 0);
  off_t size = file_size(p);
  cr_assert_eq(ploop_convert_version(test_dir, 1), -1, "3 TiB disk converted to v1");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM, "%s", ploop_get_error());
  raw_pread(p, after, CL, 0);
  cr_assert_eq(raw_le32(p, 44), 0, "refused conversion left the in-use mark set");
  cr_assert_arr_eq(before, after, CL, "refused conversion changed the header or BAT");
  cr_assert_eq(file_size(p), size);
  cr_assert(!file_exists(tpath("root.hds.convert-backup")));
}
