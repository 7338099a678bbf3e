/* Unit tests for DiskDescriptor.xml (formats/disk-descriptor.md): load/save
 * round trip, atomic replacement, and refusal of unsafe or inconsistent
 * descriptors (paths leaving the directory, cycles, two tops, missing parents). */
#include "helpers.h"

TestSuite(descriptor, .init = tmpdir_setup, .fini = tmpdir_teardown);

#define G1 "{11111111-1111-4111-8111-111111111111}"
#define G2 "{22222222-2222-4222-8222-222222222222}"
#define G3 "{33333333-3333-4333-8333-333333333333}"

/* One <Image> + <Shot> per entry: {guid, parent, file}. */
struct img {
  const char *guid, *parent, *file;
};

static void write_descriptor(const char *top, const struct img *imgs, size_t n)
{
  char xml[16384];
  int o = snprintf(xml, sizeof xml,
                   "<?xml version=\"1.0\"?>\n<Parallels_disk_image>\n  <Disk_Parameters>\n"
                   "    <Disk_size>8192</Disk_size>\n    <Cylinders>8</Cylinders>\n"
                   "    <Heads>16</Heads>\n    <Sectors>63</Sectors>\n"
                   "    <Padding>0</Padding>\n  </Disk_Parameters>\n  <StorageData>\n"
                   "    <Storage>\n      <Start>0</Start>\n      <End>8192</End>\n"
                   "      <Blocksize>64</Blocksize>\n");
  for (size_t i = 0; i < n; i++)
    o += snprintf(xml + o, sizeof xml - o,
                  "      <Image>\n        <GUID>%s</GUID>\n        <Type>Compressed</Type>\n"
                  "        <File>%s</File>\n      </Image>\n",
                  imgs[i].guid, imgs[i].file);
  o += snprintf(xml + o, sizeof xml - o,
                "    </Storage>\n  </StorageData>\n  <Snapshots>\n    <TopGUID>%s</TopGUID>\n", top);
  for (size_t i = 0; i < n; i++)
    o += snprintf(xml + o, sizeof xml - o,
                  "    <Shot>\n      <GUID>%s</GUID>\n      <ParentGUID>%s</ParentGUID>\n"
                  "    </Shot>\n",
                  imgs[i].guid, imgs[i].parent);
  snprintf(xml + o, sizeof xml - o, "  </Snapshots>\n</Parallels_disk_image>\n");
  write_text(tpath("DiskDescriptor.xml"), xml);
}

/* Real (empty) delta files for every image so only the structure is at fault. */
static void touch_deltas(const struct img *imgs, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    const char *p = tpath("%s", imgs[i].file);
    if (file_exists(p) || strchr(imgs[i].file, '/'))
      continue;
    struct ploop_delta_create_params prm = {4 << 20, 64, 2};
    OK(ploop_delta_create(p, &prm));
  }
}

/* The descriptor must be refused by load, or by validate, and by disk open. */
static void expect_refused_in(const char *dir, const char *why, const char *needle)
{
  struct ploop_descriptor *d = ploop_descriptor_load(dir);
  if (d) {
    cr_assert_eq(ploop_descriptor_validate(d), -1, "%s: accepted by load and validate", why);
    ploop_descriptor_free(d);
  }
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_CORRUPT, "%s: status %d (%s)", why, ploop_get_status(),
               ploop_get_error());
  if (needle)
    ERROR_NAMES(needle);
  struct ploop_disk *disk = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDONLY);
  cr_assert_null(disk, "%s: disk opened anyway", why);
}

static void expect_refused(const char *why, const char *needle)
{
  expect_refused_in(test_dir, why, needle);
}

Test(descriptor, created_disk_loads_with_fixed_top_guid)
{
  make_disk(64ull << 20, 128);
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  char real[PATH_MAX];
  cr_assert(realpath(test_dir, real));
  cr_assert_str_eq(d->dir, real);
  cr_assert_eq(d->size_sectors, 131072);
  cr_assert_eq(d->cluster_sectors, 128);
  cr_assert_str_eq(d->top_guid, PLOOP_TOP_GUID);
  cr_assert_eq(d->n_images, 1);
  cr_assert_eq(d->n_snapshots, 1);
  cr_assert_str_eq(d->images[0].guid, PLOOP_TOP_GUID);
  cr_assert_str_eq(d->images[0].file, "root.hds", "File must be relative");
  cr_assert_eq(d->images[0].plain, false);
  cr_assert_str_eq(d->snapshots[0].guid, PLOOP_TOP_GUID);
  cr_assert_str_eq(d->snapshots[0].parent, PLOOP_NULL_GUID);
  OK(ploop_descriptor_validate(d));
  char *ip = NOTNULL(ploop_descriptor_image_path(d, &d->images[0]));
  char want[PATH_MAX + 16];
  snprintf(want, sizeof want, "%s/root.hds", real);
  cr_assert_str_eq(ip, want);
  free(ip);
  ploop_descriptor_free(d);
}

Test(descriptor, load_accepts_dir_or_file)
{
  make_disk(4 << 20, 64);
  struct ploop_descriptor *a = NOTNULL(ploop_descriptor_load(test_dir));
  struct ploop_descriptor *b = NOTNULL(ploop_descriptor_load(tpath("DiskDescriptor.xml")));
  cr_assert_str_eq(a->dir, b->dir);
  cr_assert_eq(a->size_sectors, b->size_sectors);
  ploop_descriptor_free(a);
  ploop_descriptor_free(b);
}

static void assert_same(const struct ploop_descriptor *a, const struct ploop_descriptor *b)
{
  cr_assert_str_eq(a->dir, b->dir);
  cr_assert_eq(a->size_sectors, b->size_sectors);
  cr_assert_eq(a->cluster_sectors, b->cluster_sectors);
  cr_assert_eq(a->cylinders, b->cylinders);
  cr_assert_eq(a->heads, b->heads);
  cr_assert_str_eq(a->top_guid, b->top_guid);
  cr_assert_eq(a->n_images, b->n_images);
  cr_assert_eq(a->n_snapshots, b->n_snapshots);
  for (size_t i = 0; i < a->n_images; i++) {
    const struct ploop_image_desc *m = ploop_descriptor_find_image(b, a->images[i].guid);
    cr_assert_not_null(m, "image %s lost in round trip", a->images[i].guid);
    cr_assert_str_eq(m->file, a->images[i].file);
    cr_assert_eq(m->plain, a->images[i].plain);
  }
  for (size_t i = 0; i < a->n_snapshots; i++) {
    size_t j;
    for (j = 0; j < b->n_snapshots; j++)
      if (!strcmp(a->snapshots[i].guid, b->snapshots[j].guid))
        break;
    cr_assert_lt(j, b->n_snapshots, "shot %s lost", a->snapshots[i].guid);
    cr_assert_str_eq(a->snapshots[i].parent, b->snapshots[j].parent);
    cr_assert_eq(a->snapshots[i].temporary, b->snapshots[j].temporary);
  }
}

Test(descriptor, round_trip_of_a_three_level_stack)
{
  const struct img imgs[] = {
      {G1, PLOOP_NULL_GUID, "root.hds"},
      {G2, G1, "root.hds." G2},
      {PLOOP_TOP_GUID, G2, "top.hds"},
  };
  touch_deltas(imgs, 3);
  write_descriptor(PLOOP_TOP_GUID, imgs, 3);
  struct ploop_descriptor *a = NOTNULL(ploop_descriptor_load(test_dir));
  OK(ploop_descriptor_validate(a));
  cr_assert_eq(a->n_images, 3);
  OK(ploop_descriptor_save(a));
  struct ploop_descriptor *b = NOTNULL(ploop_descriptor_load(test_dir));
  assert_same(a, b);
  /* Saving what was loaded is a fixed point: byte-identical second save. */
  OK(ploop_descriptor_save(b));
  FILE *f = fopen(tpath("DiskDescriptor.xml"), "r");
  char x1[16384] = {0};
  size_t n1 = fread(x1, 1, sizeof x1 - 1, f);
  fclose(f);
  OK(ploop_descriptor_save(a));
  f = fopen(tpath("DiskDescriptor.xml"), "r");
  char x2[16384] = {0};
  size_t n2 = fread(x2, 1, sizeof x2 - 1, f);
  fclose(f);
  cr_assert_eq(n1, n2);
  cr_assert_str_eq(x1, x2);
  cr_assert(strstr(x1, "<Blocksize>64</Blocksize>"), "Blocksize missing: %s", x1);
  cr_assert(strstr(x1, "<TopGUID>" PLOOP_TOP_GUID "</TopGUID>"));
  cr_assert(strstr(x1, "<File>root.hds</File>"), "File must stay relative: %s", x1);
  ploop_descriptor_free(a);
  ploop_descriptor_free(b);
}

Test(descriptor, chain_goes_base_to_top)
{
  /* Listed out of order on purpose: order comes from ParentGUID. */
  const struct img imgs[] = {
      {PLOOP_TOP_GUID, G2, "top.hds"},
      {G1, PLOOP_NULL_GUID, "base.hds"},
      {G2, G1, "mid.hds"},
  };
  touch_deltas(imgs, 3);
  write_descriptor(PLOOP_TOP_GUID, imgs, 3);
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  size_t idx[8];
  int n = ploop_descriptor_chain(d, NULL, idx, 8);
  cr_assert_eq(n, 3, "%s", ploop_get_error());
  cr_assert_str_eq(d->images[idx[0]].guid, G1);
  cr_assert_str_eq(d->images[idx[1]].guid, G2);
  cr_assert_str_eq(d->images[idx[2]].guid, PLOOP_TOP_GUID);
  n = ploop_descriptor_chain(d, G2, idx, 8);
  cr_assert_eq(n, 2);
  cr_assert_str_eq(d->images[idx[1]].guid, G2);
  cr_assert_eq(ploop_descriptor_chain(d, G3, idx, 8), -1, "unknown GUID");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_NOSNAP);
  cr_assert_eq(ploop_descriptor_chain(d, NULL, idx, 2), -1, "chain longer than MAX");
  cr_assert_null(ploop_descriptor_find_image(d, G3));
  ploop_descriptor_free(d);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_depth(disk), 3);
  OK(ploop_disk_close(disk));
}

Test(descriptor, save_replaces_atomically)
{
  make_disk(4 << 20, 64);
  const char *x = tpath("DiskDescriptor.xml");
  struct stat st1, st2;
  cr_assert_eq(stat(x, &st1), 0);
  /* A stale .tmp from a crashed save must neither break load nor survive a save. */
  write_text(tpath("DiskDescriptor.xml.tmp"), "<garbage");
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  /* Keep the old file open: an in-place rewrite would show through this fd. */
  int fd = open(x, O_RDONLY);
  char before[8192] = {0};
  cr_assert_gt(pread(fd, before, sizeof before - 1, 0), 0);
  d->cylinders = 4242;
  OK(ploop_descriptor_save(d));
  cr_assert_eq(stat(x, &st2), 0);
  cr_assert_neq(st1.st_ino, st2.st_ino, "save must rename a new file over the old one");
  char after[8192] = {0};
  cr_assert_gt(pread(fd, after, sizeof after - 1, 0), 0);
  cr_assert_str_eq(before, after, "old descriptor was modified in place");
  close(fd);
  cr_assert(!file_exists(tpath("DiskDescriptor.xml.tmp")), ".tmp left behind");
  ploop_descriptor_free(d);
  d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert_eq(d->cylinders, 4242);
  ploop_descriptor_free(d);
}

Test(descriptor, rejects_file_leaving_the_directory)
{
  /* The disk lives in DIR/disk; a perfectly valid delta sits outside it in
   * DIR, so a refusal can only come from the path rule. */
  cr_assert_eq(mkdir(tpath("disk"), 0755), 0);
  struct ploop_delta_create_params prm = {4 << 20, 64, 2};
  OK(ploop_delta_create(tpath("escape.hds"), &prm));
  char *abs_path = strdup(tpath("escape.hds"));
  const char *bad[] = {"../escape.hds", abs_path, "a/../../escape.hds", "..", "", "./../escape.hds"};
  char *disk_dir = strdup(tpath("disk"));
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const struct img imgs[] = {{PLOOP_TOP_GUID, PLOOP_NULL_GUID, bad[i]}};
    write_descriptor(PLOOP_TOP_GUID, imgs, 1);
    cr_assert_eq(rename(tpath("DiskDescriptor.xml"), tpath("disk/DiskDescriptor.xml")), 0);
    char why[PATH_MAX + 16];
    snprintf(why, sizeof why, "File '%s'", bad[i]);
    expect_refused_in(disk_dir, why, NULL);
  }
  free(abs_path);
  free(disk_dir);
}

Test(descriptor, accepts_subdirectory_inside)
{
  cr_assert_eq(mkdir(tpath("sub"), 0755), 0);
  struct ploop_delta_create_params prm = {4 << 20, 64, 2};
  OK(ploop_delta_create(tpath("sub/root.hds"), &prm));
  const struct img imgs[] = {{PLOOP_TOP_GUID, PLOOP_NULL_GUID, "sub/root.hds"}};
  write_descriptor(PLOOP_TOP_GUID, imgs, 1);
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  OK(ploop_descriptor_validate(d));
  ploop_descriptor_free(d);
}

Test(descriptor, rejects_cycle)
{
  const struct img imgs[] = {
      {G1, G2, "a.hds"},
      {G2, G1, "b.hds"},
      {PLOOP_TOP_GUID, G1, "top.hds"},
  };
  touch_deltas(imgs, 3);
  write_descriptor(PLOOP_TOP_GUID, imgs, 3);
  expect_refused("parent cycle", "DiskDescriptor.xml");
}

Test(descriptor, rejects_self_parent)
{
  const struct img imgs[] = {{PLOOP_TOP_GUID, PLOOP_TOP_GUID, "top.hds"}};
  touch_deltas(imgs, 1);
  write_descriptor(PLOOP_TOP_GUID, imgs, 1);
  expect_refused("image its own parent", NULL);
}

Test(descriptor, rejects_two_tops)
{
  const struct img imgs[] = {
      {G1, PLOOP_NULL_GUID, "base.hds"},
      {PLOOP_TOP_GUID, G1, "top1.hds"},
      {PLOOP_TOP_GUID, G1, "top2.hds"},
  };
  touch_deltas(imgs, 3);
  write_descriptor(PLOOP_TOP_GUID, imgs, 3);
  expect_refused("two images with the top GUID", NULL);
}

Test(descriptor, rejects_two_bases)
{
  const struct img imgs[] = {
      {G1, PLOOP_NULL_GUID, "base1.hds"},
      {G2, PLOOP_NULL_GUID, "base2.hds"},
      {PLOOP_TOP_GUID, G1, "top.hds"},
  };
  touch_deltas(imgs, 3);
  write_descriptor(PLOOP_TOP_GUID, imgs, 3);
  expect_refused("two bases", NULL);
}

Test(descriptor, rejects_missing_parent)
{
  const struct img imgs[] = {
      {G1, PLOOP_NULL_GUID, "base.hds"},
      {PLOOP_TOP_GUID, G3, "top.hds"},
  };
  touch_deltas(imgs, 2);
  write_descriptor(PLOOP_TOP_GUID, imgs, 2);
  expect_refused("parent not in the descriptor", NULL);
}

Test(descriptor, rejects_top_guid_not_present)
{
  const struct img imgs[] = {{G1, PLOOP_NULL_GUID, "base.hds"}, {G2, G1, "top.hds"}};
  touch_deltas(imgs, 2);
  write_descriptor(G3, imgs, 2);
  expect_refused("TopGUID names no image", NULL);
}

Test(descriptor, rejects_malformed_guid)
{
  const struct img imgs[] = {{"{not-a-guid}", PLOOP_NULL_GUID, "base.hds"},
                             {PLOOP_TOP_GUID, "{not-a-guid}", "top.hds"}};
  touch_deltas(imgs, 2);
  write_descriptor(PLOOP_TOP_GUID, imgs, 2);
  expect_refused("malformed GUID", NULL);
}

Test(descriptor, rejects_missing_delta_file)
{
  const struct img imgs[] = {{PLOOP_TOP_GUID, PLOOP_NULL_GUID, "gone.hds"}};
  write_descriptor(PLOOP_TOP_GUID, imgs, 1);
  struct ploop_descriptor *d = ploop_descriptor_load(test_dir);
  if (d) {
    cr_assert_eq(ploop_descriptor_validate(d), -1, "missing delta file accepted");
    ERROR_NAMES("gone.hds");
    ploop_descriptor_free(d);
  }
  cr_assert_null(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
}

Test(descriptor, rejects_unparseable_xml_naming_the_file)
{
  write_text(tpath("DiskDescriptor.xml"), "<Parallels_disk_image><Disk_Parameters>");
  cr_assert_null(ploop_descriptor_load(test_dir));
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_CORRUPT, "%s", ploop_get_error());
  ERROR_NAMES("DiskDescriptor.xml");
  write_text(tpath("DiskDescriptor.xml"), "");
  cr_assert_null(ploop_descriptor_load(test_dir), "empty file accepted");
}

Test(descriptor, rejects_bad_blocksize)
{
  const struct img imgs[] = {{PLOOP_TOP_GUID, PLOOP_NULL_GUID, "root.hds"}};
  touch_deltas(imgs, 1);
  write_descriptor(PLOOP_TOP_GUID, imgs, 1);
  /* Patch Blocksize to a non-power of two. */
  FILE *f = fopen(tpath("DiskDescriptor.xml"), "r");
  char x[16384] = {0};
  size_t n = fread(x, 1, sizeof x - 1, f);
  fclose(f);
  cr_assert_gt(n, 0);
  char *b = strstr(x, "<Blocksize>64<");
  cr_assert_not_null(b);
  memcpy(b, "<Blocksize>96<", 14);
  write_text(tpath("DiskDescriptor.xml"), x);
  expect_refused("Blocksize 96", NULL);
}

Test(descriptor, missing_descriptor_is_notfound)
{
  cr_assert_null(ploop_descriptor_load(test_dir));
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_NOTFOUND, "status %d (%s)", ploop_get_status(),
               ploop_get_error());
}

Test(descriptor, old_style_top_guid_is_converted)
{
  /* Older ploop wrote an arbitrary TopGUID; it is renamed to the fixed one. */
  const struct img imgs[] = {{G1, PLOOP_NULL_GUID, "base.hds"}, {G2, G1, "top.hds"}};
  touch_deltas(imgs, 2);
  write_descriptor(G2, imgs, 2);
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert_str_eq(d->top_guid, PLOOP_TOP_GUID);
  const struct ploop_image_desc *top = ploop_descriptor_find_image(d, PLOOP_TOP_GUID);
  cr_assert_not_null(top);
  cr_assert_str_eq(top->file, "top.hds");
  cr_assert_null(ploop_descriptor_find_image(d, G2));
  ploop_descriptor_free(d);
}
