/* Unit tests for the two directions of an offline merge: down (the child's
 * clusters written into the parent) and up (the parent's unshadowed
 * clusters written into the child, which then takes the parent's place and
 * file name). Each test checks the data, the descriptor and the files. */
#define CL 32768u
#define DISK_SIZE (4u << 20) /* 128 clusters of 32 KiB */

#include <dirent.h>
#include <sys/stat.h>

#include "stack.h"

TestSuite(merge, .init = tmpdir_setup, .fini = tmpdir_teardown);

static ino_t inode_of(const char *path)
{
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0, "%s: %s", path, strerror(errno));
  return sb.st_ino;
}

/* Files in the test directory that are not the descriptor or its lock. */
static int stray_files(void)
{
  DIR *dir = opendir(test_dir);
  cr_assert_not_null(dir);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir)))
    if (e->d_name[0] != '.' && strncmp(e->d_name, PLOOP_DESCRIPTOR_NAME, strlen(PLOOP_DESCRIPTOR_NAME)))
      n++;
  closedir(dir);
  return n;
}

struct progress {
  uint64_t calls, last_done, last_total;
};

static void on_progress(void *opaque, uint64_t done, uint64_t total)
{
  struct progress *p = opaque;
  p->calls++;
  p->last_done = done;
  p->last_total = total;
}

/* Base holds clusters 0-63; the top rewrites 0-59 (and adds 100-101): the
 * way up writes 4 clusters, the way down 62. */
Test(merge, up_when_the_child_rewrote_its_parent)
{
  static uint8_t model[DISK_SIZE];
  struct ploop_disk *disk = new_disk();
  put_both(disk, model, 1, 0, 64 * CL);
  char s1[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, s1));
  put_both(disk, model, 2, 0, 60 * CL);
  put_both(disk, model, 3, 100 * CL, 2 * CL);
  OK(ploop_disk_close(disk));
  char *base = NOTNULL(image_path(s1)), *top = NOTNULL(image_path(PLOOP_TOP_GUID));
  ino_t top_ino = inode_of(top);
  struct progress pr = {0};
  OK(ploop_snapshot_merge(test_dir, NULL, true, on_progress, &pr));
  cr_assert_eq(n_images(), 1);
  char *now = NOTNULL(image_path(PLOOP_TOP_GUID));
  cr_assert_str_eq(now, base, "the merged disk keeps the base's file name");
  cr_assert_eq(inode_of(now), top_ino, "merging up keeps the top's file (written up, not down)");
  cr_assert(!file_exists(top), "%s: the top's old name is left behind", top);
  cr_assert_eq(stray_files(), 1, "a merged-away file is left in the directory");
  cr_assert_eq(pr.last_done, 4 * CL, "the way up copies the 4 parent clusters the top lacks");
  cr_assert_eq(pr.last_total, 4 * CL);
  assert_disk_is(model, "after merging up");
  assert_all_deltas_clean();
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert_str_eq(d->snapshots[0].guid, PLOOP_TOP_GUID);
  cr_assert_str_eq(d->snapshots[0].parent, PLOOP_NULL_GUID);
  ploop_descriptor_free(d);
  /* The result is an ordinary writable disk. */
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put_both(disk, model, 4, 120 * CL, CL);
  OK(ploop_disk_close(disk));
  assert_disk_is(model, "after writing to the merged disk");
  free(base);
  free(top);
  free(now);
}

Test(merge, down_when_the_child_is_small)
{
  static uint8_t model[DISK_SIZE];
  struct ploop_disk *disk = new_disk();
  put_both(disk, model, 1, 0, 64 * CL);
  char s1[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, s1));
  put_both(disk, model, 2, 10 * CL + 5, 2 * CL);
  OK(ploop_disk_close(disk));
  char *base = NOTNULL(image_path(s1));
  ino_t base_ino = inode_of(base);
  struct progress pr = {0};
  OK(ploop_snapshot_merge(test_dir, NULL, true, on_progress, &pr));
  char *now = NOTNULL(image_path(PLOOP_TOP_GUID));
  cr_assert_str_eq(now, base);
  cr_assert_eq(inode_of(now), base_ino, "merging down writes into the base's file");
  cr_assert_eq(stray_files(), 1);
  char tmp[sizeof test_dir + sizeof PLOOP_DESCRIPTOR_NAME + 8];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", test_dir, PLOOP_DESCRIPTOR_NAME);
  cr_assert(!file_exists(tmp), "the descriptor's .tmp (written beside the copy) is left behind");
  cr_assert_eq(pr.last_done, 3 * CL, "the way down copies the top's 3 clusters (progress in bytes)");
  cr_assert_eq(pr.last_total, 3 * CL);
  assert_disk_is(model, "after merging down");
  assert_all_deltas_clean();
  free(base);
  free(now);
}

/* S1 <- S2 <- top, S2 rewrote all of S1 but one cluster: merging S2 goes up
 * into S2's file, which takes S1's name; S2's view and the top's stay. */
Test(merge, up_in_the_middle_keeps_every_view)
{
  static uint8_t model[DISK_SIZE];
  struct ploop_disk *disk = new_disk();
  put_both(disk, model, 1, 0, 16 * CL);
  char s1[PLOOP_UUID_LEN + 1], s2[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, s1));
  put_both(disk, model, 2, CL, 15 * CL);
  OK(ploop_disk_snapshot(disk, NULL, s2));
  put(disk, 3, 3 * CL, CL);
  OK(ploop_disk_close(disk));
  uint8_t *s2_view = read_view(s2, NULL);
  uint8_t *top_view = read_view(NULL, NULL);
  char *f1 = NOTNULL(image_path(s1)), *f2 = NOTNULL(image_path(s2));
  ino_t s2_ino = inode_of(f2);
  OK(ploop_snapshot_merge(test_dir, s2, false, NULL, NULL));
  cr_assert_eq(n_images(), 2);
  char *gone = image_path(s1), *now = NOTNULL(image_path(s2));
  cr_assert_null(gone, "S1 is merged away");
  cr_assert_str_eq(now, f1, "S2's file takes S1's name");
  cr_assert_eq(inode_of(now), s2_ino);
  cr_assert(!file_exists(f2));
  uint8_t *b = read_view(s2, NULL);
  assert_equal_model(b, s2_view, DISK_SIZE, "S2 after the merge");
  free(b);
  b = read_view(NULL, NULL);
  assert_equal_model(b, top_view, DISK_SIZE, "top after the merge");
  free(b);
  assert_equal_model(s2_view, model, DISK_SIZE, "S2 before the merge");
  assert_all_deltas_clean();
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  struct ploop_snapshot_desc *s = NULL;
  for (size_t i = 0; i < d->n_snapshots; i++)
    if (!strcmp(d->snapshots[i].guid, s2))
      s = &d->snapshots[i];
  cr_assert_not_null(s);
  cr_assert_str_eq(s->parent, PLOOP_NULL_GUID, "S2 is the base now");
  ploop_descriptor_free(d);
  free(s2_view);
  free(top_view);
  free(f1);
  free(f2);
  free(now);
}

/* Snapshot-delete of a base whose only child rewrote it goes up too. */
Test(merge, delete_goes_up_when_cheaper)
{
  static uint8_t model[DISK_SIZE];
  struct ploop_disk *disk = new_disk();
  put(disk, 1, 0, 8 * CL);
  char s1[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, s1));
  put_both(disk, model, 2, 0, 8 * CL);
  OK(ploop_disk_close(disk));
  char *top = NOTNULL(image_path(PLOOP_TOP_GUID));
  struct stat before;
  cr_assert_eq(stat(top, &before), 0);
  OK(ploop_snapshot_delete(test_dir, s1));
  cr_assert_eq(n_images(), 1);
  cr_assert_eq(stray_files(), 1);
  /* The top shadowed every cluster: nothing to copy, its file is kept as
   * it was (not even the header rewritten) under the base's name. */
  char *now = NOTNULL(image_path(PLOOP_TOP_GUID));
  struct stat after;
  cr_assert_eq(stat(now, &after), 0);
  cr_assert_eq(after.st_ino, before.st_ino);
  cr_assert(after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec,
            "the top's file was written");
  free(top);
  free(now);
  assert_disk_is(model, "after deleting the base snapshot");
  assert_all_deltas_clean();
}

/* Sets or reads the Temporary mark of snapshot GUID in the descriptor. */
static void set_temporary(const char *guid, bool on)
{
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  bool found = false;
  for (size_t i = 0; i < d->n_snapshots; i++)
    if (!strcmp(d->snapshots[i].guid, guid)) {
      d->snapshots[i].temporary = on;
      found = true;
    }
  cr_assert(found, "no snapshot %s", guid);
  OK(ploop_descriptor_save(d));
  ploop_descriptor_free(d);
}

static bool is_temporary(const char *guid)
{
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  int found = -1;
  for (size_t i = 0; i < d->n_snapshots; i++)
    if (!strcmp(d->snapshots[i].guid, guid))
      found = d->snapshots[i].temporary;
  ploop_descriptor_free(d);
  cr_assert_neq(found, -1, "no snapshot %s", guid);
  return found;
}

/* S1 <- S2 <- top, S2 merged into S1 while S2 is marked Temporary (as an
 * unfinished merge of the top into it leaves it): the merged file carries
 * S2's GUID and holds S2's not-guaranteed view, so it stays Temporary, the
 * way up (S2 rewrote S1) and the way down (S2 is small) alike. The parent's
 * own mark, set while it was written, does not survive either way. */
static void merge_temporary_child(bool child_rewrites_parent)
{
  static uint8_t model[DISK_SIZE];
  memset(model, 0, sizeof model);
  struct ploop_disk *disk = new_disk();
  put_both(disk, model, 1, 0, 16 * CL);
  char s1[PLOOP_UUID_LEN + 1], s2[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, s1));
  size_t n2 = child_rewrites_parent ? 16 * CL : 2 * CL;
  put_both(disk, model, 2, 0, n2);
  OK(ploop_disk_snapshot(disk, NULL, s2));
  put_both(disk, model, 3, 20 * CL, CL);
  OK(ploop_disk_close(disk));
  char *f1 = NOTNULL(image_path(s1)), *f2 = NOTNULL(image_path(s2));
  ino_t ino1 = inode_of(f1), ino2 = inode_of(f2);
  set_temporary(s2, true);
  OK(ploop_snapshot_merge(test_dir, s2, false, NULL, NULL));
  cr_assert_eq(n_images(), 2);
  char *now = NOTNULL(image_path(s2));
  cr_assert_eq(inode_of(now), child_rewrites_parent ? ino2 : ino1, "the merge went %s",
               child_rewrites_parent ? "down, not up" : "up, not down");
  cr_assert(is_temporary(s2), "merging %s cleared the merged child's Temporary mark",
            child_rewrites_parent ? "up" : "down");
  assert_disk_is(model, "top after the merge");
  /* And an ordinary child leaves an ordinary snapshot: the top merged into
   * the (still Temporary) S2 takes the top's unmarked state. */
  OK(ploop_snapshot_merge(test_dir, NULL, false, NULL, NULL));
  cr_assert(!is_temporary(PLOOP_TOP_GUID), "the merged top is marked Temporary");
  assert_disk_is(model, "after merging the top");
  assert_all_deltas_clean();
  free(f1);
  free(f2);
  free(now);
}

Test(merge, down_keeps_the_childs_temporary_mark)
{
  merge_temporary_child(false);
}

Test(merge, up_keeps_the_childs_temporary_mark)
{
  merge_temporary_child(true);
}

/* An empty top merged into an empty parent (what dropping an import's
 * top does on a new disk): the parent stays flagged empty, as OpenVZ's
 * check demands of a delta with no clusters (m_Flags bit 0, offset 52). */
Test(merge, empty_into_empty_keeps_the_empty_flag)
{
  make_disk(DISK_SIZE, CL / 512);
  char snap[PLOOP_UUID_LEN + 1];
  OK(ploop_snapshot_create(tpath(""), NULL, snap));
  OK(ploop_snapshot_merge(tpath(""), NULL, false, NULL, NULL));
  cr_assert_eq(raw_le32(tpath("root.hds"), 52) & 1, 1, "the merged, empty delta lost its Empty flag");
}
