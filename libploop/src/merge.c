/* Merging a delta into its parent, offline and online. Crash safety: the
 * parent is marked Temporary in the descriptor before it changes (so no one
 * serves it as a snapshot), only clusters the child holds are written into
 * it (reads through the child see the same data at every step), and the
 * descriptor switch that drops the child comes after the parent is durable
 * (offline, its data, then its BAT and a clean header, in two syncs).
 * Offline, when fewer clusters move that way, the merge goes up instead: the
 * parent's clusters the child lacks are copied into the child (the parent is
 * never written), and the child takes the parent's place and file name. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "io.h"

/* Checks that CHILD can merge into its parent; fills PARENT guid. */
static int merge_preflight(struct ploop_descriptor *d, const char *child, char *parent)
{
  struct ploop_snapshot_desc *cs = descriptor_find_shot(d, child);
  if (!cs || !ploop_descriptor_find_image(d, child))
    return ploop_error(PLOOP_ERR_NOSNAP, ENOENT, "%s: no snapshot %s", d->dir, child);
  if (!strcmp(cs->parent, PLOOP_NULL_GUID))
    return ploop_error(PLOOP_ERR_PARAM, EINVAL,
                       "%s: %s is the base image; there is nothing below to merge into", d->dir, child);
  snprintf(parent, PLOOP_UUID_LEN + 1, "%s", cs->parent);
  size_t n = descriptor_children(d, parent, NULL);
  if (n > 1)
    return ploop_error(PLOOP_ERR_PARAM, EBUSY,
                       "%s: snapshot %s has %zu children; merging one into it would change the others",
                       d->dir, parent, n);
  if (ploop_descriptor_find_image(d, child)->plain)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: a raw image cannot be merged down", d->dir);
  return 0;
}

/* The descriptor after the merge: the parent's file now holds the child's
 * state and carries the child's GUID. It is Temporary exactly when the
 * child was (as merging up leaves it): the parent's own mark only said its
 * view was changing, and that view is gone; a Temporary child (the target
 * of an unfinished merge from above, say) holds a view that is still not
 * its own, and so does the merged file. */
static void merge_commit_descriptor(struct ploop_descriptor *d, const char *child, const char *parent)
{
  struct ploop_snapshot_desc *ps = descriptor_find_shot(d, parent);
  char grand[PLOOP_UUID_LEN + 1];
  snprintf(grand, sizeof grand, "%s", ps->parent);
  bool temporary = descriptor_find_shot(d, child)->temporary;
  descriptor_remove_image(d, child);
  for (size_t i = 0; i < d->n_images; i++)
    if (!strcmp(d->images[i].guid, parent))
      snprintf(d->images[i].guid, sizeof d->images[i].guid, "%s", child);
  ps = descriptor_find_shot(d, parent);
  snprintf(ps->guid, sizeof ps->guid, "%s", child);
  snprintf(ps->parent, sizeof ps->parent, "%s", grand);
  ps->temporary = temporary;
}

/* Copies X into P (P open read-write) and grows P to X's size if needed.
 * With SEAL, when P needs no shrinking after the copy, P ends clean on
 * disk and is left read-only in memory: nothing more is written to it. */
static int merge_data(struct ploop_delta *x, struct ploop_delta *p, ploop_progress_fn progress, void *opaque,
                      bool seal)
{
  if (!p->raw && x->h.size_sectors > p->h.size_sectors && delta_set_size(p, x->h.size_sectors, false) < 0)
    return -1;
  uint64_t total = delta_count_allocated(x);
  if (seal && (p->raw || x->h.size_sectors >= p->h.size_sectors))
    return merge_delta_into_sealed(x, p, progress, opaque, total);
  if (merge_delta_into(x, p, false, progress, opaque, 0, total) < 0)
    return -1;
  if (!p->raw && x->h.size_sectors < p->h.size_sectors && delta_set_size(p, x->h.size_sectors, true) < 0)
    return -1;
  return 0;
}

/* Which way moves fewer clusters: down, writing every cluster the child
 * holds into the parent, or up, writing the parent's clusters the child
 * does not shadow into the child's holes (qemu's block-stream direction).
 * When the child rewrote most of its parent, up writes next to nothing.
 * *UP gets the count for the way up. */
static bool merge_up_cheaper(const struct ploop_delta *x, const struct ploop_delta *p, uint64_t *up)
{
  *up = 0;
  if (x->raw || p->raw || x->cluster_bytes != p->cluster_bytes)
    return false;
  uint64_t down = 0;
  for (uint64_t vc = 0; vc < delta_clusters(x); vc++) {
    if (delta_lookup(x, vc))
      down++;
    else if (delta_lookup(p, vc))
      (*up)++;
  }
  return *up < down;
}

/* The descriptor after merging up: the child's file holds the state, the
 * parent's entries go, and the child hangs off the grandparent. */
static void merge_up_commit_descriptor(struct ploop_descriptor *d, const char *child, const char *parent)
{
  char grand[PLOOP_UUID_LEN + 1];
  snprintf(grand, sizeof grand, "%s", descriptor_find_shot(d, parent)->parent);
  descriptor_remove_image(d, parent);
  snprintf(descriptor_find_shot(d, child)->parent, PLOOP_UUID_LEN + 1, "%s", grand);
}

/* Merging up: the parent is never written, so its snapshot view and the
 * child's stay what they were at every step (no Temporary mark needed); a
 * crash before the descriptor switch leaves the child holding some copies
 * of its parent's clusters. X is open read-write (read-only when UP is 0),
 * P read-only; both are closed here. */
static int merge_up(struct ploop_descriptor *d, const char *child, const char *parent, struct ploop_delta *x,
                    struct ploop_delta *p, uint64_t up, ploop_progress_fn progress, void *opaque)
{
  char *child_path = ploop_strdup(x->path), *parent_path = ploop_strdup(p->path);
  char *parent_file = ploop_strdup(ploop_descriptor_find_image(d, parent)->file);
  int rc = -1;
  if (!child_path || !parent_path || !parent_file)
    goto out;
  /* The fill seals X (one sync for its BAT and clean header, not the three
   * of a flush and a clean close). */
  if (up && merge_fill_holes(p, x, progress, opaque, up) < 0)
    goto out;
  rc = delta_close(x, true);
  x = NULL;
  if (rc < 0)
    goto out;
  rc = -1;
  merge_up_commit_descriptor(d, child, parent);
  if (ploop_descriptor_save(d) < 0)
    goto out;
  /* The parent's file is unreferenced now; its name goes to the child's
   * file (a second link, then the descriptor, then the old name), so the
   * base keeps its name and a crash leaves the descriptor naming a file
   * that exists. */
  delta_close(p, false);
  p = NULL;
  if (store_remove(d->dir, parent_path) < 0) {
    ploop_error_os(parent_path, "remove merged delta");
    goto out;
  }
  ploop_fault_point("merge-up-parent-removed");
  rc = 0;
  /* The new link must be on disk before a descriptor names it. */
  if (store_link(d->dir, child_path, parent_path) == 0 && store_sync_names(d->dir, parent_path) == 0) {
    ploop_fault_point("merge-up-linked");
    for (size_t i = 0; i < d->n_images; i++)
      if (!strcmp(d->images[i].guid, child)) {
        free(d->images[i].file);
        d->images[i].file = parent_file;
        parent_file = NULL;
      }
    if (ploop_descriptor_save(d) < 0)
      rc = -1;
    else if (store_remove(d->dir, child_path) < 0 && (store_is_file(store_for(d->dir)) || errno != ENOENT))
      rc = ploop_error_os(child_path, "remove the merged delta's old name");
    else
      ploop_fault_point("merge-up-old-name-removed");
  }
out:
  /* On failure X holds copies of some of P's clusters, flushed in order:
   * it closes clean like any consistent delta. */
  delta_close(x, true);
  delta_close(p, false);
  free(child_path);
  free(parent_path);
  free(parent_file);
  return rc;
}

struct tmp_sync {
  int fd, err;
};

static void *tmp_sync_main(void *arg)
{
  struct tmp_sync *t = arg;
  t->err = t->fd >= 0 && fsync(t->fd) < 0 ? errno : 0;
  return NULL;
}

/* Down: the descriptor after the merge is known before the copy, so its
 * .tmp file is written and synced while the copy runs (the sync of a new
 * file cost 0.2 s at the end of the 1 GiB merge bench); only the rename
 * waits for the parent to be durable. Updates D on success. */
static int merge_down(struct ploop_descriptor *d, const char *child, const char *parent,
                      struct ploop_delta *x, struct ploop_delta *p, ploop_progress_fn progress, void *opaque)
{
  descriptor_find_shot(d, parent)->temporary = true;
  if (ploop_descriptor_save(d) < 0)
    return -1;
  struct ploop_descriptor *nd = descriptor_dup(d);
  if (!nd)
    return -1;
  merge_commit_descriptor(nd, child, parent);
  int rc = -1, tfd;
  if (descriptor_write_tmp(nd, &tfd) < 0) {
    ploop_descriptor_free(nd);
    return -1;
  }
  struct tmp_sync ts = {.fd = tfd};
  pthread_t tid;
  bool threaded = pthread_create(&tid, NULL, tmp_sync_main, &ts) == 0;
  int copied = merge_data(x, p, progress, opaque, true);
  if (threaded)
    pthread_join(tid, NULL);
  else if (copied == 0)
    tmp_sync_main(&ts);
  if (copied < 0) {
    descriptor_abort_tmp(nd, tfd);
  } else if (ts.err) {
    ploop_error(PLOOP_ERR_IO, ts.err, "%s/%s.tmp: fsync: %s", d->dir, PLOOP_DESCRIPTOR_NAME,
                strerror(ts.err));
    descriptor_abort_tmp(nd, tfd);
  } else if (descriptor_commit_tmp(nd, tfd, true) == 0) {
    merge_commit_descriptor(d, child, parent);
    rc = 0;
  }
  ploop_descriptor_free(nd);
  return rc;
}

int merge_child_into_parent(struct ploop_descriptor *d, const char *child, ploop_progress_fn progress,
                            void *opaque)
{
  char parent[PLOOP_UUID_LEN + 1];
  if (merge_preflight(d, child, parent) < 0)
    return -1;
  const struct ploop_image_desc *ci = ploop_descriptor_find_image(d, child);
  const struct ploop_image_desc *pi = ploop_descriptor_find_image(d, parent);
  char *child_path = ploop_descriptor_image_path(d, ci);
  /* Both read-only until the direction is known: opening read-write marks
   * a delta in use. */
  struct ploop_delta *x = delta_open_image(d, ci, PLOOP_OPEN_RDONLY);
  struct ploop_delta *p = x ? delta_open_image(d, pi, PLOOP_OPEN_RDONLY) : NULL;
  int rc = -1;
  if (!child_path || !x || !p)
    goto out;
  uint64_t up;
  if (merge_up_cheaper(x, p, &up)) {
    /* Nothing to copy (the child shadows all of its parent): the child's
     * file stays as it is, not even its header is rewritten. */
    if (up) {
      delta_close(x, false);
      x = delta_open_image(d, ci, PLOOP_OPEN_RDWR);
      if (!x)
        goto out;
    }
    rc = merge_up(d, child, parent, x, p, up, progress, opaque);
    x = p = NULL;
    free(child_path);
    if (rc < 0)
      ploop_error_wrap("merge %s", child);
    return rc;
  }
  delta_close(p, false);
  p = delta_open_image(d, pi, PLOOP_OPEN_RDWR);
  if (!p)
    goto out;
  if (merge_down(d, child, parent, x, p, progress, opaque) < 0)
    goto out;
  rc = 0;
out:
  if (p && delta_close(p, true) < 0)
    rc = -1;
  delta_close(x, false);
  if (rc == 0 && store_remove(d->dir, child_path) < 0)
    rc = ploop_error_os(child_path, "remove merged delta");
  if (rc == 0)
    ploop_fault_point("merge-child-removed");
  free(child_path);
  if (rc < 0)
    ploop_error_wrap("merge %s", child);
  return rc;
}

int ploop_snapshot_merge(const char *dir_or_xml, const char *guid, bool all, ploop_progress_fn progress,
                         void *opaque)
{
  int lock;
  struct ploop_descriptor *d =
      descriptor_load_locked(dir_or_xml, &lock, PLOOP_LOCK_WRITER | PLOOP_LOCK_DELTAS);
  if (!d)
    return -1;
  int rc = 0;
  char g[PLOOP_UUID_LEN + 1];
  if (all) {
    /* Refuse before anything changes if any level cannot merge. */
    size_t chain[PLOOP_MAX_DELTAS];
    int levels = ploop_descriptor_chain(d, NULL, chain, PLOOP_MAX_DELTAS);
    char parent[PLOOP_UUID_LEN + 1];
    for (int i = 1; i < levels && rc == 0; i++)
      rc = merge_preflight(d, d->images[chain[i]].guid, parent);
    if (levels < 0)
      rc = -1;
    /* Bottom-up: each delta is copied once, into the base. */
    for (; rc == 0;) {
      size_t idx[PLOOP_MAX_DELTAS];
      int n = ploop_descriptor_chain(d, NULL, idx, PLOOP_MAX_DELTAS);
      if (n < 0) {
        rc = -1;
        break;
      }
      if (n < 2)
        break;
      snprintf(g, sizeof g, "%s", d->images[idx[1]].guid);
      if ((rc = merge_child_into_parent(d, g, progress, opaque)) < 0)
        break;
    }
  } else {
    if (guid) {
      if (ploop_uuid_normalize(guid, g) < 0)
        rc = -1;
    } else {
      snprintf(g, sizeof g, "%s", PLOOP_TOP_GUID);
    }
    if (rc == 0)
      rc = merge_child_into_parent(d, g, progress, opaque);
  }
  ploop_unlock_disk(lock);
  ploop_descriptor_free(d);
  return rc;
}

/* Online: merge the delta at stack index I into the one below it. Below the
 * top, the copy runs while I/O goes on (what changes in the parent is
 * shadowed by the child); the top itself is merged with I/O paused. */
static int disk_merge_index(struct ploop_disk *disk, unsigned i, ploop_progress_fn progress, void *opaque)
{
  char child[PLOOP_UUID_LEN + 1], parent[PLOOP_UUID_LEN + 1];
  struct ploop_descriptor *d = NULL;
  struct ploop_delta *p = NULL;
  int rc = -1;
  bool top = i == 0, exclusive = top;
  if (top)
    disk_lock_exclusive(disk);
  else
    pthread_rwlock_rdlock(&disk->rw);
  d = descriptor_dup(disk->desc);
  if (!d)
    goto unlock;
  size_t idx[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(d, NULL, idx, PLOOP_MAX_DELTAS);
  if (n < 0 || (unsigned)n != disk->n)
    goto unlock;
  snprintf(child, sizeof child, "%s", d->images[idx[n - 1 - i]].guid);
  if (merge_preflight(d, child, parent) < 0)
    goto unlock;
  p = delta_open_image(d, ploop_descriptor_find_image(d, parent), PLOOP_OPEN_RDWR);
  if (!p)
    goto unlock;
  if (top)
    delta_flush(disk->deltas[0]);
  descriptor_find_shot(d, parent)->temporary = true;
  if (ploop_descriptor_save(d) < 0 || merge_data(disk->deltas[i], p, progress, opaque, false) < 0)
    goto unlock;
  if (!top) {
    pthread_rwlock_unlock(&disk->rw);
    disk_lock_exclusive(disk); /* mappings of the child or old parent end first */
    exclusive = true;
  }
  merge_commit_descriptor(d, child, parent);
  if (ploop_descriptor_save(d) < 0)
    goto unlock;
  /* Swap the stack: P (read-write object) replaces child and old parent. */
  struct ploop_delta *x = disk->deltas[i], *old_p = disk->deltas[i + 1];
  if (!top) {
    delta_set_in_use(p, false);
    p->rdwr = false;
  }
  disk->deltas[i] = p;
  memmove(&disk->deltas[i + 1], &disk->deltas[i + 2], (disk->n - i - 2) * sizeof disk->deltas[0]);
  disk->n--;
  p = NULL;
  ploop_descriptor_free(disk->desc);
  disk->desc = d;
  d = NULL;
  char *xpath = ploop_strdup(x->path);
  x->rdwr = false;
  delta_close(x, false);
  delta_close(old_p, false);
  if (xpath && store_remove(disk->dir, xpath) < 0)
    ploop_error_os(xpath, "remove merged delta");
  else
    ploop_fault_point("merge-child-removed");
  free(xpath);
  rc = 0;
unlock:
  if (exclusive)
    disk_unlock_exclusive(disk);
  else
    pthread_rwlock_unlock(&disk->rw);
  if (p)
    delta_close(p, true);
  ploop_descriptor_free(d);
  return rc;
}

static int disk_merge_all_or_one(struct ploop_disk *disk, const char *guid, bool all,
                                 ploop_progress_fn progress, void *opaque);

int ploop_disk_merge(struct ploop_disk *disk, const char *guid, bool all, ploop_progress_fn progress,
                     void *opaque)
{
  if (!disk->rdwr || disk->snapshot_guid)
    return ploop_error(PLOOP_ERR_PARAM, EROFS, "%s: merge needs the disk open read-write", disk->dir);
  /* No one may be reading a snapshot whose delta this merge rewrites. */
  int lock = ploop_lock_disk(disk->dir, PLOOP_LOCK_DELTAS);
  if (lock == -1 && !(disk->open_flags & PLOOP_OPEN_NO_LOCK))
    return -1;
  int rc = disk_merge_all_or_one(disk, guid, all, progress, opaque);
  ploop_unlock_disk(lock);
  return rc;
}

static int disk_merge_all_or_one(struct ploop_disk *disk, const char *guid, bool all,
                                 ploop_progress_fn progress, void *opaque)
{
  if (all) {
    while (disk->n > 1)
      if (disk_merge_index(disk, disk->n - 2, progress, opaque) < 0)
        return -1;
    return 0;
  }
  unsigned i = 0;
  if (guid) {
    char g[PLOOP_UUID_LEN + 1];
    if (ploop_uuid_normalize(guid, g) < 0)
      return -1;
    pthread_rwlock_rdlock(&disk->rw);
    size_t idx[PLOOP_MAX_DELTAS];
    int n = ploop_descriptor_chain(disk->desc, NULL, idx, PLOOP_MAX_DELTAS);
    bool found = false;
    for (int k = 0; k < n; k++)
      if (!strcmp(disk->desc->images[idx[k]].guid, g)) {
        i = (unsigned)(n - 1 - k);
        found = true;
      }
    pthread_rwlock_unlock(&disk->rw);
    if (!found)
      return ploop_error(PLOOP_ERR_NOSNAP, ENOENT, "%s: no snapshot %s in the served stack", disk->dir, g);
  }
  if (i + 1 >= disk->n)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: the base image has nothing below to merge into",
                       disk->dir);
  return disk_merge_index(disk, i, progress, opaque);
}
