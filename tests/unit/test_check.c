/* Unit tests for ploop_delta_check: each class of damage is planted by hand in
 * a delta file and must be reported, and repaired on disk when asked. */
#include "helpers.h"

enum { H_IN_USE = 44, H_FLAGS = 52, BAT0 = 64 };
#define IN_USE_MARK 0x746F6E59u
#define CL 32768 /* 64-sector clusters keep the files tiny */

TestSuite(check, .init = tmpdir_setup, .fini = tmpdir_teardown);

/* A 4 MiB delta with virtual clusters 0 and 1 allocated at file clusters 1, 2. */
static const char *make_delta(void)
{
  const char *p = tpath("c.hds");
  struct ploop_delta_create_params prm = {4 << 20, 64, 2};
  OK(ploop_delta_create(p, &prm));
  static uint8_t buf[2 * CL];
  fill_pattern(buf, sizeof buf, 7, 0);
  raw_pwrite(p, buf, sizeof buf, CL);
  raw_put_le32(p, BAT0 + 0, 1);
  raw_put_le32(p, BAT0 + 4, 2);
  return p;
}

static int check(const char *p, unsigned flags, struct ploop_check_report *r)
{
  memset(r, 0xA5, sizeof *r); /* catch fields the library forgets to set */
  int rc = ploop_delta_check(p, flags, r);
  cr_assert_neq(rc, -1, "check failed outright: %s", ploop_get_error());
  return rc;
}

static void assert_no_damage(const struct ploop_check_report *r)
{
  cr_assert_eq(r->clusters_beyond_eof, 0);
  cr_assert_eq(r->clusters_beyond_size, 0);
  cr_assert_eq(r->clusters_misaligned, 0);
  cr_assert_eq(r->clusters_duplicate, 0);
  cr_assert_eq(r->clusters_in_bat_area, 0);
  cr_assert_eq(r->header_bad, false);
  cr_assert_eq(r->file_size_unaligned, false);
}

Test(check, clean_delta_is_clean)
{
  const char *p = make_delta();
  struct ploop_check_report r;
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE, &r), 0);
  assert_no_damage(&r);
  cr_assert_eq(r.clusters_lost, 0);
  cr_assert_eq(r.in_use, false);
}

Test(check, in_use_mark_is_reported_and_repaired)
{
  const char *p = make_delta();
  raw_put_le32(p, H_IN_USE, IN_USE_MARK);
  struct ploop_check_report r;
  check(p, PLOOP_CHECK_READONLY, &r);
  cr_assert(r.in_use, "in-use mark not reported");
  cr_assert_eq(raw_le32(p, H_IN_USE), IN_USE_MARK, "READONLY check wrote the header");
  cr_assert_eq(check(p, PLOOP_CHECK_REPAIR, &r), 0, "a dirty but intact delta repairs clean");
  cr_assert(r.repaired);
  assert_no_damage(&r);
  cr_assert_eq(raw_le32(p, H_IN_USE), 0, "repair must clear the in-use mark");
  /* The repaired delta opens read-write without ALLOW_DIRTY and kept its data. */
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDWR));
  OK(ploop_delta_close(d));
  cr_assert_eq(raw_le32(p, BAT0), 1);
  cr_assert_eq(raw_le32(p, BAT0 + 4), 2);
}

Test(check, entry_past_eof_is_reported_and_zeroed)
{
  const char *p = make_delta();
  raw_put_le32(p, BAT0 + 4 * 5, 9); /* file has 3 clusters */
  struct ploop_check_report r;
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE, &r), 1);
  cr_assert_eq(r.clusters_beyond_eof, 1);
  cr_assert_eq(raw_le32(p, BAT0 + 4 * 5), 9, "check without REPAIR changed the BAT");
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE | PLOOP_CHECK_REPAIR, &r), 0);
  cr_assert(r.repaired);
  cr_assert_eq(raw_le32(p, BAT0 + 4 * 5), 0, "bad slot must be zeroed");
  cr_assert_eq(raw_le32(p, BAT0), 1, "good slots must be kept");
  cr_assert_eq(raw_le32(p, BAT0 + 4), 2);
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE, &r), 0, "still broken after repair");
}

Test(check, duplicate_reference_is_reported)
{
  const char *p = make_delta();
  raw_put_le32(p, BAT0 + 4 * 7, 2); /* virtual 1 and 7 share file cluster 2 */
  struct ploop_check_report r;
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE, &r), 1);
  cr_assert_geq(r.clusters_duplicate, 1);
}

Test(check, entry_in_bat_area_is_reported)
{
  /* 2 GiB at 32 KiB: 65536 entries = 256 KiB + 64 B of BAT = 9 header clusters. */
  const char *p = tpath("big.hds");
  struct ploop_delta_create_params prm = {2ull << 30, 64, 2};
  OK(ploop_delta_create(p, &prm));
  cr_assert_eq(truncate(p, 10 * CL), 0);
  raw_put_le32(p, BAT0, 3);
  struct ploop_check_report r;
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE, &r), 1);
  cr_assert_eq(r.clusters_in_bat_area, 1);
}

Test(check, lost_cluster_is_reported_but_not_corruption)
{
  /* A crash between the data write and its BAT update leaves exactly this. */
  const char *p = make_delta();
  raw_put_le32(p, H_IN_USE, IN_USE_MARK);
  cr_assert_eq(truncate(p, 5 * CL), 0);
  /* The data reached the file (cluster 3); cluster 4 was only reserved
   * (a hole, as after a discard's punch): it costs no space and is not lost. */
  static uint8_t data[512];
  memset(data, 0x5a, sizeof data);
  raw_pwrite(p, data, sizeof data, 3 * CL);
  struct ploop_check_report r;
  cr_assert_eq(check(p, PLOOP_CHECK_REPAIR, &r), 0, "a lost cluster is not corruption");
  cr_assert_eq(r.clusters_lost, 1);
  assert_no_damage(&r);
}

Test(check, unaligned_file_size_is_reported_and_fixed)
{
  const char *p = make_delta();
  cr_assert_eq(truncate(p, 3 * CL + 100), 0);
  struct ploop_check_report r;
  check(p, PLOOP_CHECK_FORCE, &r);
  cr_assert(r.file_size_unaligned);
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE | PLOOP_CHECK_REPAIR, &r), 0);
  cr_assert_eq(file_size(p) % CL, 0, "repair must leave whole clusters");
  cr_assert_geq(file_size(p), 3 * CL, "repair must not cut referenced clusters");
}

Test(check, bad_header_is_reported)
{
  const char *p = make_delta();
  raw_pwrite(p, "NotAPloopImage!!", 16, 0);
  struct ploop_check_report r;
  memset(&r, 0, sizeof r);
  int rc = ploop_delta_check(p, PLOOP_CHECK_FORCE, &r);
  cr_assert_neq(rc, 0, "bad header checked clean");
  if (rc == 1) {
    cr_assert(r.header_bad);
    cr_assert_neq(r.header_problem[0], 0, "header_problem should say what is wrong");
  } else {
    ERROR_NAMES(base_name(p));
  }
}

Test(check, report_format_names_each_problem)
{
  const char *p = make_delta();
  raw_put_le32(p, BAT0 + 4 * 5, 9);
  raw_put_le32(p, BAT0 + 4 * 7, 2);
  struct ploop_check_report r;
  check(p, PLOOP_CHECK_FORCE, &r);
  char buf[2048];
  memset(buf, 0, sizeof buf);
  ploop_check_report_format(&r, buf, sizeof buf);
  int lines = 0;
  for (char *s = buf; *s; s++)
    lines += *s == '\n';
  cr_assert_geq(lines + (buf[0] && buf[strlen(buf) - 1] != '\n'), 2, "want one line per problem, got: %s",
                buf);
  char small[8];
  memset(small, 'X', sizeof small);
  ploop_check_report_format(&r, small, sizeof small);
  cr_assert(memchr(small, 0, sizeof small), "output must be NUL-terminated within LEN");
}

Test(check, repair_of_qemu_written_image_keeps_data)
{
  if (!have_cmd("qemu-img") || !have_cmd("qemu-io"))
    cr_skip_test("qemu-img/qemu-io not installed");
  const char *p = tpath("q.hds");
  char cmd[2 * PATH_MAX];
  snprintf(cmd, sizeof cmd,
           "qemu-img create -q -f parallels -o cluster_size=64K %s 4M && "
           "qemu-io -c 'write -q -P 0x5a 65536 4096' %s",
           p, p);
  cr_assert_eq(system(cmd), 0);
  struct ploop_check_report r;
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE, &r), 0, "qemu-written image must check clean");
  assert_no_damage(&r);
  cr_assert_eq(r.clusters_lost, 0);
}

Test(check, whole_disk_check_covers_every_delta)
{
  make_disk(4 << 20, 64);
  char g[PLOOP_UUID_LEN + 1];
  OK(ploop_snapshot_create(test_dir, NULL, g));
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  char *lower = NOTNULL(ploop_descriptor_image_path(d, ploop_descriptor_find_image(d, g)));
  ploop_descriptor_free(d);
  char msg[4096] = "";
  cr_assert_eq(ploop_disk_check(test_dir, PLOOP_CHECK_FORCE, msg, sizeof msg), 0, "%s", msg);
  /* Damage the lower delta only: the disk check must find it. */
  cr_assert_eq(truncate(lower, 2 * CL), 0);
  raw_put_le32(lower, BAT0 + 4 * 3, 7);
  memset(msg, 0, sizeof msg);
  cr_assert_eq(ploop_disk_check(test_dir, PLOOP_CHECK_FORCE, msg, sizeof msg), 1,
               "damage in a lower delta not found: %s", msg);
  cr_assert(strstr(msg, base_name(lower)), "message should name %s: %s", lower, msg);
  cr_assert_eq(ploop_disk_check(test_dir, PLOOP_CHECK_FORCE | PLOOP_CHECK_REPAIR, msg, sizeof msg), 0, "%s",
               msg);
  cr_assert_eq(raw_le32(lower, BAT0 + 4 * 3), 0);
  free(lower);
}

Test(check, whole_disk_check_reports_missing_delta)
{
  make_disk(4 << 20, 64);
  cr_assert_eq(unlink(tpath("root.hds")), 0);
  char msg[4096] = "";
  int rc = ploop_disk_check(test_dir, PLOOP_CHECK_FORCE, msg, sizeof msg);
  cr_assert_neq(rc, 0, "a disk without its delta checked clean");
  cr_assert(strstr(msg, "root.hds") || strstr(ploop_get_error(), "root.hds"),
            "should name the missing file: %s / %s", msg, ploop_get_error());
}

Test(check, format_extension_cluster_is_not_lost_and_is_dropped_on_write)
{
  /* A ploop CBT extension cluster appended at file cluster 3; the header
   * points at it in sectors (ploop's cbt.c and qemu agree on sectors). */
  const char *p = make_delta();
  static uint8_t ext[CL];
  uint64_t magic = htole64(0xAB234CEF23DCEA87ull);
  memcpy(ext, &magic, 8);
  raw_pwrite(p, ext, CL, 3 * CL);
  raw_put_le64(p, 56, 3 * CL / 512);
  struct ploop_check_report r;
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE, &r), 0);
  cr_assert_eq(r.clusters_lost, 0, "the extension cluster is referenced by the header");
  struct ploop_delta *d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDONLY));
  OK(ploop_delta_close(d));
  cr_assert_eq(raw_le64(p, 56), 3 * CL / 512, "a read-only open must not drop it");
  d = NOTNULL(ploop_delta_open(p, PLOOP_OPEN_RDWR));
  cr_assert_eq(raw_le64(p, 56), 0, "a writer must drop the (now stale) extension");
  OK(ploop_delta_close(d));
  cr_assert_eq(check(p, PLOOP_CHECK_FORCE, &r), 0);
  cr_assert_eq(r.clusters_lost, 1, "once dropped, its cluster is ordinary lost space");
}
