/* Unit tests for snapshots: a snapshot's view never changes, and
 * delete/merge/switch keep every byte that should survive, also under
 * concurrent writers. Resize is in test_resize.c. */
#define CL 32768u
#define DISK_SIZE (4u << 20) /* 128 clusters of 32 KiB */

#include "stack.h"

TestSuite(snapshot, .init = tmpdir_setup, .fini = tmpdir_teardown);

Test(snapshot, snapshot_view_is_frozen)
{
  make_disk(DISK_SIZE, CL / 512);
  static uint8_t model[DISK_SIZE], frozen[DISK_SIZE];
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put_both(disk, model, 1, 0, 4 * CL);
  memcpy(frozen, model, DISK_SIZE);
  char s1[PLOOP_UUID_LEN + 1] = "";
  OK(ploop_disk_snapshot(disk, NULL, s1));
  cr_assert_eq(strlen(s1), PLOOP_UUID_LEN, "snapshot GUID not returned: '%s'", s1);
  cr_assert_str_neq(s1, PLOOP_TOP_GUID);
  cr_assert_eq(ploop_disk_depth(disk), 2);
  /* Writes after the snapshot: a partial cluster over old data (copy-up),
   * a new cluster, and a discard of an old one. */
  put_both(disk, model, 2, CL + 1000, 3000);
  put_both(disk, model, 3, 10 * CL, CL);
  OK(ploop_disk_discard(disk, 3 * CL, CL));
  memset(model + 3 * CL, 0, CL);
  cr_assert_eq(depth_at(disk, 0), 2, "untouched cluster comes from the snapshot");
  cr_assert_eq(depth_at(disk, CL), 1, "rewritten cluster lives in the top");
  cr_assert_eq(depth_at(disk, 20 * CL), 0);
  uint8_t *now = read_all(disk);
  assert_equal_model(now, model, DISK_SIZE, "top view while open");
  free(now);

  /* The snapshot's old top file is read-only now: not marked in use. */
  char *p = NOTNULL(image_path(s1));
  cr_assert_eq(raw_le32(p, 44), 0, "snapshot delta %s carries the in-use mark", p);
  free(p);
  OK(ploop_disk_close(disk));

  uint8_t *snap = read_view(s1, NULL);
  assert_equal_model(snap, frozen, DISK_SIZE, "snapshot view");
  free(snap);
  assert_disk_is(model, "top view after reopen");
  assert_all_deltas_clean();
}

Test(snapshot, snapshot_view_readable_while_top_is_open)
{
  /* Serving a snapshot export while the container writes the top. */
  struct ploop_disk *disk = new_disk();
  put(disk, 1, 0, CL);
  char s1[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, s1));
  put(disk, 2, 0, CL);
  struct ploop_disk *view = NOTNULL(ploop_disk_open(test_dir, s1, PLOOP_OPEN_RDONLY));
  cr_assert(ploop_disk_readonly(view));
  uint8_t b[4096];
  OK(ploop_disk_pread(view, b, sizeof b, 0));
  cr_assert_eq(check_pattern(b, sizeof b, 1, 0), -1, "snapshot view shows later writes");
  OK(ploop_disk_close(view));
  OK(ploop_disk_close(disk));
}

Test(snapshot, offline_snapshot_with_given_guid)
{
  make_disk(DISK_SIZE, CL / 512);
  const char *g = "{0A0B0C0D-1111-4222-8333-444455556666}";
  char out[PLOOP_UUID_LEN + 1];
  OK(ploop_snapshot_create(test_dir, g, out));
  cr_assert_str_eq(out, "{0a0b0c0d-1111-4222-8333-444455556666}", "GUID must be normalised");
  cr_assert_eq(n_images(), 2);
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  size_t idx[4];
  cr_assert_eq(ploop_descriptor_chain(d, NULL, idx, 4), 2);
  cr_assert_str_eq(d->images[idx[0]].guid, out);
  cr_assert_str_eq(d->images[idx[1]].guid, PLOOP_TOP_GUID);
  ploop_descriptor_free(d);
  /* The same GUID twice is refused. */
  cr_assert_eq(ploop_snapshot_create(test_dir, g, out), -1, "duplicate snapshot GUID accepted");
  cr_assert_eq(n_images(), 2);
}

Test(snapshot, delete_leaf_removes_it)
{
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1], s2[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  OK(ploop_snapshot_create(test_dir, NULL, s2)); /* S1 <- S2 <- top */
  uint8_t *s1_view = read_view(s1, NULL);
  OK(ploop_snapshot_switch(test_dir, s1)); /* S1 <- top', S2 is now a leaf */
  char *s2_file = NOTNULL(image_path(s2));
  OK(ploop_snapshot_delete(test_dir, s2));
  cr_assert(!file_exists(s2_file), "deleted leaf's file %s still there", s2_file);
  char *gone = image_path(s2);
  cr_assert_null(gone);
  cr_assert_eq(n_images(), 2);
  uint64_t n;
  uint8_t *top = read_view(NULL, &n);
  assert_equal_model(top, s1_view, DISK_SIZE, "top after switch+delete");
  free(top);
  free(s1_view);
  free(s2_file);
}

Test(snapshot, delete_with_one_child_merges)
{
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  cr_assert_eq(n_images(), 2);
  OK(ploop_snapshot_delete(test_dir, s1));
  cr_assert_eq(n_images(), 1);
  char *gone = image_path(s1);
  cr_assert_null(gone);
  assert_disk_is(model, "after delete-merge");
  assert_all_deltas_clean();
  /* No stray delta files left in the directory. */
  char *top = NOTNULL(image_path(PLOOP_TOP_GUID));
  cr_assert(file_exists(top));
  free(top);
}

Test(snapshot, delete_refuses_top_unknown_and_branch_points)
{
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1], s2[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  cr_assert_eq(ploop_snapshot_delete(test_dir, PLOOP_TOP_GUID), -1, "top deleted");
  cr_assert_eq(ploop_snapshot_delete(test_dir, "{99999999-9999-4999-8999-999999999999}"), -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_NOSNAP, "%s", ploop_get_error());
  OK(ploop_snapshot_create(test_dir, NULL, s2));
  OK(ploop_snapshot_switch(test_dir, s1)); /* S1 has two children: S2 and top */
  cr_assert_eq(ploop_snapshot_delete(test_dir, s1), -1, "snapshot with two children deleted");
  cr_assert_eq(n_images(), 3);
}

struct progress {
  uint64_t calls, last_done, last_total;
  bool went_back;
};

static void on_progress(void *opaque, uint64_t done, uint64_t total)
{
  struct progress *p = opaque;
  if (p->calls && done < p->last_done)
    p->went_back = true;
  p->calls++;
  p->last_done = done;
  p->last_total = total;
}

Test(snapshot, merge_middle_into_parent)
{
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1], s2[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  OK(ploop_snapshot_create(test_dir, NULL, s2)); /* S1 <- S2 <- top */
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put_both(disk, model, 3, 5 * CL, 2 * CL);
  OK(ploop_disk_close(disk));
  char *f1 = NOTNULL(image_path(s1)), *f2 = NOTNULL(image_path(s2));
  struct progress pr = {0};
  OK(ploop_snapshot_merge(test_dir, s2, false, on_progress, &pr));
  cr_assert_eq(n_images(), 2);
  char *after1 = image_path(s1), *after2 = image_path(s2);
  cr_assert(!!after1 + !!after2 == 1, "exactly one of S1/S2 must remain");
  free(after1);
  free(after2);
  cr_assert(file_exists(f1) + file_exists(f2) == 1, "the merged-away file must be unlinked");
  assert_disk_is(model, "top after merge");
  assert_all_deltas_clean();
  cr_assert_gt(pr.calls, 0, "progress never called");
  cr_assert(!pr.went_back, "progress went backwards");
  cr_assert_eq(pr.last_done, pr.last_total, "progress did not reach total");
  free(f1);
  free(f2);
}

Test(snapshot, merge_all_into_base)
{
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1], s2[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  OK(ploop_snapshot_create(test_dir, NULL, s2));
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put_both(disk, model, 4, 100 * CL, CL);
  OK(ploop_disk_discard(disk, 0, CL)); /* a hole in the top over data below */
  memset(model, 0, CL);
  OK(ploop_disk_close(disk));
  OK(ploop_snapshot_merge(test_dir, NULL, true, NULL, NULL));
  cr_assert_eq(n_images(), 1);
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert_str_eq(d->images[0].guid, PLOOP_TOP_GUID);
  cr_assert_str_eq(d->snapshots[0].parent, PLOOP_NULL_GUID);
  ploop_descriptor_free(d);
  assert_disk_is(model, "after merging everything");
  assert_all_deltas_clean();
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  cr_assert_eq(ploop_disk_depth(disk), 1);
  put(disk, 5, 0, 512);
  OK(ploop_disk_close(disk));
}

Test(snapshot, merge_top_into_parent)
{
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  OK(ploop_snapshot_merge(test_dir, PLOOP_TOP_GUID, false, NULL, NULL));
  cr_assert_eq(n_images(), 1);
  assert_disk_is(model, "after merging the top down");
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put(disk, 6, 50 * CL, 100);
  OK(ploop_disk_close(disk));
}

Test(snapshot, online_merge_keeps_serving)
{
  static uint8_t model[DISK_SIZE];
  struct ploop_disk *disk = new_disk();
  put_both(disk, model, 1, 0, 8 * CL);
  char s1[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, s1));
  put_both(disk, model, 2, 4 * CL, 8 * CL);
  OK(ploop_disk_merge(disk, NULL, true, NULL, NULL));
  cr_assert_eq(ploop_disk_depth(disk), 1);
  uint8_t *b = read_all(disk);
  assert_equal_model(b, model, DISK_SIZE, "after online merge");
  free(b);
  put_both(disk, model, 3, 20 * CL, CL);
  OK(ploop_disk_close(disk));
  assert_disk_is(model, "after online merge and reopen");
  cr_assert_eq(n_images(), 1);
}

Test(snapshot, switch_reverts_to_snapshot)
{
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  uint8_t *s1_view = read_view(s1, NULL);
  char *old_top = NOTNULL(image_path(PLOOP_TOP_GUID));
  OK(ploop_snapshot_switch(test_dir, s1));
  uint8_t *top = read_view(NULL, NULL);
  assert_equal_model(top, s1_view, DISK_SIZE, "after switch");
  cr_assert_eq(n_images(), 2);
  /* The new top is empty; the old one is gone unless it reuses the name. */
  char *new_top = NOTNULL(image_path(PLOOP_TOP_GUID));
  if (strcmp(old_top, new_top) != 0)
    cr_assert(!file_exists(old_top), "old top %s not removed", old_top);
  struct ploop_delta *d = NOTNULL(ploop_delta_open(new_top, PLOOP_OPEN_RDONLY));
  struct ploop_delta_info in;
  OK(ploop_delta_get_info(d, &in));
  cr_assert_eq(in.allocated_clusters, 0, "new top after switch must be empty");
  OK(ploop_delta_close(d));
  cr_assert_eq(ploop_snapshot_switch(test_dir, "{99999999-9999-4999-8999-999999999999}"), -1);
  free(top);
  free(s1_view);
  free(old_top);
  free(new_top);
}

Test(snapshot, stack_depth_is_limited)
{
  make_disk(DISK_SIZE, CL / 512);
  char g[PLOOP_UUID_LEN + 1];
  unsigned made = 0;
  while (made < PLOOP_MAX_DELTAS + 2 && ploop_snapshot_create(test_dir, NULL, g) == 0)
    made++;
  /* ploop refuses a snapshot once the disk has 126 images ("n > 128-2"): at most
   * 126 snapshots (every image but the top), 127 images in all. */
  cr_assert_eq(made, PLOOP_MAX_DELTAS - 2, "made %u snapshots; limit is %u snapshots", made,
               PLOOP_MAX_DELTAS - 2);
  cr_assert_eq(n_images(), PLOOP_MAX_DELTAS - 1);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  cr_assert_eq(ploop_disk_depth(disk), PLOOP_MAX_DELTAS - 1);
  put(disk, 1, 0, 512);
  OK(ploop_disk_close(disk));
}

Test(snapshot, online_snapshots_under_concurrent_writers_are_consistent)
{
  static uint64_t done[NCLUSTERS];
  struct ploop_disk *disk = new_disk();
  struct writers ws;
  writers_start(&ws, disk, done);
  enum { NSNAP = 5 };
  char snaps[NSNAP][PLOOP_UUID_LEN + 1];
  for (int k = 0; k < NSNAP; k++) {
    usleep(20000);
    OK(ploop_disk_snapshot(disk, NULL, snaps[k]));
  }
  usleep(20000);
  writers_stop(&ws);
  OK(ploop_disk_close(disk));
  /* Every view holds whole writes only, and versions only move forward. */
  uint64_t prev[NCLUSTERS] = {0}, cur[NCLUSTERS];
  for (int k = 0; k <= NSNAP; k++) {
    view_versions(k < NSNAP ? snaps[k] : NULL, cur);
    for (uint32_t c = 0; c < NCLUSTERS; c++)
      cr_assert_geq(cur[c], prev[c], "cluster %u went back from version %llu to %llu", c,
                    (unsigned long long)prev[c], (unsigned long long)cur[c]);
    memcpy(prev, cur, sizeof prev);
  }
  for (uint32_t c = 0; c < NCLUSTERS; c++)
    cr_assert_eq(cur[c], done[c], "top: cluster %u holds version %llu, last written %llu", c,
                 (unsigned long long)cur[c], (unsigned long long)done[c]);
  assert_all_deltas_clean();
}

Test(snapshot, online_merge_under_concurrent_writers)
{
  static uint64_t done[NCLUSTERS];
  struct ploop_disk *disk = new_disk();
  struct writers ws;
  writers_start(&ws, disk, done);
  char g[PLOOP_UUID_LEN + 1];
  for (int k = 0; k < 3; k++) {
    usleep(10000);
    OK(ploop_disk_snapshot(disk, NULL, g));
  }
  usleep(10000);
  OK(ploop_disk_merge(disk, NULL, true, NULL, NULL));
  cr_assert_eq(ploop_disk_depth(disk), 1);
  usleep(10000);
  writers_stop(&ws);
  /* The last version each writer completed is what the disk holds. */
  OK(ploop_disk_close(disk));
  uint64_t v[NCLUSTERS];
  view_versions(NULL, v);
  for (uint32_t c = 0; c < NCLUSTERS; c++)
    cr_assert_eq(v[c], done[c], "cluster %u holds version %llu, last written %llu", c,
                 (unsigned long long)v[c], (unsigned long long)done[c]);
  cr_assert_eq(n_images(), 1);
  assert_all_deltas_clean();
}

/* Every file of the disk directory with its size and a checksum. */
static unsigned long long dir_fingerprint(void)
{
  char cmd[PATH_MAX + 128];
  snprintf(cmd, sizeof cmd,
           "cd %s && ls -l --time-style=+ | grep -v lck | md5sum && "
           "ls | grep -v lck | xargs cat | md5sum",
           test_dir);
  FILE *f = popen(cmd, "r");
  cr_assert_not_null(f);
  char line[256];
  unsigned long long h = 1469598103934665603ull;
  while (fgets(line, sizeof line, f))
    for (char *c = line; *c; c++)
      h = (h ^ (unsigned char)*c) * 1099511628211ull;
  pclose(f);
  return h;
}

Test(snapshot, refused_merge_all_changes_nothing)
{
  /* S1 <- S2 <- {S3, top}: S2 is a branch point, so merging everything is
   * refused, and must be refused before any level is merged. */
  static uint8_t model[DISK_SIZE];
  char s1[PLOOP_UUID_LEN + 1], s2[PLOOP_UUID_LEN + 1], s3[PLOOP_UUID_LEN + 1];
  base_snapshot_write(model, s1);
  OK(ploop_snapshot_create(test_dir, NULL, s2));
  OK(ploop_snapshot_create(test_dir, NULL, s3));
  OK(ploop_snapshot_switch(test_dir, s2));
  cr_assert_eq(n_images(), 4);
  unsigned long long before = dir_fingerprint();
  cr_assert_eq(ploop_snapshot_merge(test_dir, NULL, true, NULL, NULL), -1,
               "merge of a tree with a branch point accepted");
  cr_assert_eq(dir_fingerprint(), before, "a refused merge changed files in the disk directory");
  cr_assert_eq(n_images(), 4);
}

Test(snapshot, merge_into_a_raw_base)
{
  static uint8_t model[DISK_SIZE];
  struct ploop_disk *disk = new_disk();
  put_both(disk, model, 1, 0, 3 * CL);
  OK(ploop_disk_close(disk));
  OK(ploop_convert_format(test_dir, true)); /* base becomes Plain */
  char s1[PLOOP_UUID_LEN + 1];
  OK(ploop_snapshot_create(test_dir, NULL, s1));
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put_both(disk, model, 2, CL + 100, CL);
  put_both(disk, model, 3, 50 * CL, 700);
  cr_assert_eq(depth_at(disk, 0), 2, "cluster 0 comes from the raw base");
  OK(ploop_disk_close(disk));
  assert_disk_is(model, "raw base + top");
  OK(ploop_snapshot_merge(test_dir, NULL, true, NULL, NULL));
  cr_assert_eq(n_images(), 1);
  assert_disk_is(model, "merged into the raw base");
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  cr_assert(d->images[0].plain, "the base should still be raw");
  char *raw = NOTNULL(ploop_descriptor_image_path(d, &d->images[0]));
  ploop_descriptor_free(d);
  uint8_t *b = malloc(DISK_SIZE);
  raw_pread(raw, b, DISK_SIZE, 0);
  assert_equal_model(b, model, DISK_SIZE, "raw base file");
  free(b);
  free(raw);
}

/* More changed clusters than the library keeps allocations in flight (256):
 * the bulk copy of a merge must not wait on itself. */
Test(snapshot, merge_of_many_small_clusters_completes, .timeout = 60)
{
  const uint64_t size = 1024ull * CL; /* 32 MiB of 32 KiB clusters */
  make_disk(size, CL / 512);
  char s1[PLOOP_UUID_LEN + 1];
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put(disk, 1, 0, CL); /* the base holds one cluster, the rest come from above */
  OK(ploop_disk_snapshot(disk, NULL, s1));
  put(disk, 2, 0, size);
  OK(ploop_disk_close(disk));
  OK(ploop_snapshot_merge(test_dir, NULL, true, NULL, NULL));
  cr_assert_eq(n_images(), 1);
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  uint8_t *b = malloc(size);
  OK(ploop_disk_pread(disk, b, size, 0));
  cr_assert_eq(check_pattern(b, size, 2, 0), -1, "merged data differs");
  free(b);
  OK(ploop_disk_close(disk));
}

/* Eight threads write their own 4 KiB slot of the same clusters at once, all
 * of them unallocated in the top and held by the snapshot below: every
 * allocation races with copy-up, and no slot may be lost or overwritten by
 * another thread's copy of older data. */
struct slot_writer {
  struct ploop_disk *disk;
  uint32_t slot;
  int failed;
};

static void *slot_writer_run(void *arg)
{
  struct slot_writer *w = arg;
  uint8_t b[4096];
  for (uint32_t c = 0; c < 64; c++) {
    uint64_t off = (uint64_t)c * CL + (uint64_t)w->slot * 4096;
    fill_pattern(b, sizeof b, 500 + w->slot, off);
    if (ploop_disk_pwrite(w->disk, b, sizeof b, off, 0) < 0)
      w->failed = 1;
  }
  return NULL;
}

Test(snapshot, racing_partial_writes_to_unallocated_clusters_with_copy_up)
{
  struct ploop_disk *disk = new_disk();
  put(disk, 1, 0, 64 * CL); /* old data below, to be copied up */
  char s1[PLOOP_UUID_LEN + 1];
  OK(ploop_disk_snapshot(disk, NULL, s1));
  enum { N = CL / 4096 };
  pthread_t t[N];
  struct slot_writer w[N];
  for (uint32_t i = 0; i < N; i++) {
    w[i] = (struct slot_writer){disk, i, 0};
    cr_assert_eq(pthread_create(&t[i], NULL, slot_writer_run, &w[i]), 0);
  }
  for (uint32_t i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(w[i].failed, 0);
  }
  OK(ploop_disk_close(disk));
  disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  uint8_t b[4096];
  for (uint32_t c = 0; c < 64; c++)
    for (uint32_t s = 0; s < N; s++) {
      uint64_t off = (uint64_t)c * CL + (uint64_t)s * 4096;
      OK(ploop_disk_pread(disk, b, sizeof b, off));
      cr_assert_eq(check_pattern(b, sizeof b, 500 + s, off), -1, "cluster %u slot %u lost its write", c, s);
    }
  OK(ploop_disk_close(disk));
  assert_all_deltas_clean();
}
