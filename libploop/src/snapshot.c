/* Snapshots: create (instant: one new empty file and a descriptor rewrite),
 * switch, delete. Merging lives in merge.c. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "io.h"

/* A file name for a new delta beside the base image: "<base>.{uuid}". */
static int new_delta_name(const struct ploop_descriptor *desc, char *out, size_t len)
{
  size_t idx[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(desc, NULL, idx, PLOOP_MAX_DELTAS);
  if (n < 0)
    return -1;
  const char *base = desc->images[idx[0]].file;
  char uuid[PLOOP_UUID_LEN + 1];
  ploop_uuid_generate(uuid);
  if ((size_t)snprintf(out, len, "%s.%s", base, uuid) >= len)
    return ploop_error(PLOOP_ERR_PARAM, ENAMETOOLONG, "%s: image name too long", base);
  return 0;
}

static int pick_guid(const struct ploop_descriptor *desc, const char *guid, char *out)
{
  if (guid) {
    if (ploop_uuid_normalize(guid, out) < 0)
      return -1;
    if (!strcmp(out, PLOOP_TOP_GUID) || !strcmp(out, PLOOP_NULL_GUID))
      return ploop_error(PLOOP_ERR_PARAM, EINVAL, "UUID %s is reserved", out);
  } else {
    ploop_uuid_generate(out);
  }
  if (ploop_descriptor_find_image(desc, out))
    return ploop_error(PLOOP_ERR_PARAM, EEXIST, "%s: snapshot %s already exists", desc->dir, out);
  return 0;
}

/* The new top of an online snapshot, made while I/O goes on (the caller
 * holds the read side of disk->rw, or the exclusive lock): an empty delta
 * NT at PATH (its store object NSO still open for the final flush) and the
 * descriptor ND naming it. Creating and opening an image is most of a
 * snapshot's time on a store across the network (Ceph: a dozen round
 * trips); writes wait only for the sealing of the old top. */
struct snap_prep {
  char g[PLOOP_UUID_LEN + 1], file[1024], path[4096];
  struct store_obj nso;
  struct ploop_delta *nt;
  struct ploop_descriptor *nd;
};

static void snap_prep_drop(struct ploop_disk *disk, struct snap_prep *sp)
{
  store_close(&sp->nso);
  if (sp->nt) {
    delta_close(sp->nt, false);
    sp->nt = NULL;
    store_remove(disk->dir, sp->path);
  }
  ploop_descriptor_free(sp->nd);
  sp->nd = NULL;
}

static int snap_prepare(struct ploop_disk *disk, const char *guid, struct snap_prep *sp)
{
  *sp = (struct snap_prep){.nso = {.fd = -1}};
  /* 127 images at most, as ploop: 126 snapshots and the top. */
  if (disk->n >= PLOOP_MAX_DELTAS - 1)
    return ploop_error(PLOOP_ERR_PARAM, EMLINK, "%s: at most %u snapshots", disk->dir, PLOOP_MAX_DELTAS - 2);
  if (pick_guid(disk->desc, guid, sp->g) < 0 || new_delta_name(disk->desc, sp->file, sizeof sp->file) < 0)
    return -1;
  struct ploop_delta *top = disk->deltas[0];
  snprintf(sp->path, sizeof sp->path, "%s/%s", disk->dir, sp->file);
  struct ploop_delta_create_params p = {
      .size_bytes = disk->size_bytes,
      .cluster_sectors = disk->desc->cluster_sectors,
      .version = top->raw ? 2 : top->h.version,
  };
  if (delta_create_file_nosync(disk->dir, sp->path, &p, true, &sp->nso) < 0)
    return -1;
  sp->nt = delta_open(disk->dir, sp->path, PLOOP_OPEN_RDWR | DELTA_OPEN_FRESH);
  if (!sp->nt) {
    store_close(&sp->nso);
    store_remove(disk->dir, sp->path);
    return -1;
  }
  sp->nd = descriptor_dup(disk->desc);
  if (!sp->nd) {
    snap_prep_drop(disk, sp);
    return -1;
  }
  descriptor_rename_guid(sp->nd, PLOOP_TOP_GUID, sp->g);
  if (descriptor_add_image(sp->nd, PLOOP_TOP_GUID, sp->file, sp->g) < 0) {
    snap_prep_drop(disk, sp);
    return -1;
  }
  snprintf(sp->nd->top_guid, sizeof sp->nd->top_guid, "%s", PLOOP_TOP_GUID);
  return 0;
}

int ploop_disk_snapshot(struct ploop_disk *disk, const char *guid, char *out)
{
  if (!disk->rdwr || disk->snapshot_guid)
    return ploop_error(PLOOP_ERR_PARAM, EROFS, "%s: snapshot needs the disk open read-write", disk->dir);
  struct snap_prep sp;
  int rc = -1, tfd = -1;
  pthread_rwlock_rdlock(&disk->rw);
  unsigned gen = disk->exclusive_gen;
  int prc = snap_prepare(disk, guid, &sp);
  pthread_rwlock_unlock(&disk->rw);
  if (prc < 0)
    return -1;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  disk_lock_exclusive(disk); /* drains in-flight I/O: nothing acknowledged is left out */
  if (disk->exclusive_gen != gen + 1) {
    /* Another structure change came between: prepare again, now inside. */
    snap_prep_drop(disk, &sp);
    if (snap_prepare(disk, guid, &sp) < 0)
      goto out;
  }
  struct ploop_delta *top = disk->deltas[0];
  if (descriptor_write_tmp(sp.nd, &tfd) < 0)
    goto fail_unlink;
  /* The old top becomes immutable: every acknowledged write and its BAT
   * entry durable, the in-use mark cleared, before the descriptor says so.
   * Its last sync, the new delta's and the descriptor's run at once. */
  if (delta_seal_begin(top) < 0)
    goto fail_seal;
  struct store_obj *objs[2] = {&top->so, &sp.nso};
  if (store_flush_all(objs, 2, &tfd, 1) < 0)
    goto fail_seal;
  ploop_fault_point("snapshot-synced");
  if (descriptor_commit_tmp(sp.nd, tfd, true) < 0) {
    tfd = -1;
    goto fail_seal;
  }
  store_close(&sp.nso);
  top->rdwr = false;
  memmove(&disk->deltas[1], &disk->deltas[0], disk->n * sizeof disk->deltas[0]);
  disk->deltas[0] = sp.nt;
  disk->n++;
  ploop_descriptor_free(disk->desc);
  disk->desc = sp.nd;
  sp.nd = NULL;
  sp.nt = NULL;
  if (out)
    snprintf(out, PLOOP_UUID_LEN + 1, "%s", sp.g);
  rc = 0;
  goto out;
fail_seal:
  top->h.in_use = PLOOP_IN_USE; /* still the top: put the mark back */
  delta_write_header(top);
fail_unlink:
  if (tfd >= 0)
    descriptor_abort_tmp(sp.nd, tfd);
  snap_prep_drop(disk, &sp);
out:
  clock_gettime(CLOCK_MONOTONIC, &t1);
  disk->snapshot_pause_us =
      (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000);
  disk_unlock_exclusive(disk);
  ploop_descriptor_free(sp.nd);
  return rc;
}

uint64_t ploop_disk_snapshot_pause_us(const struct ploop_disk *disk)
{
  return disk->snapshot_pause_us;
}

/* Offline: the top is closed and clean, so nothing in it changes; a new
 * clean delta and the descriptor rewrite are the whole job. */
int ploop_snapshot_create(const char *dir_or_xml, const char *guid, char *out)
{
  int lock;
  struct ploop_descriptor *d = descriptor_load_locked(dir_or_xml, &lock, PLOOP_LOCK_WRITER);
  if (!d)
    return -1;
  int rc = -1;
  char g[PLOOP_UUID_LEN + 1], file[1024], path[4096];
  struct ploop_delta *top = NULL;
  size_t idx[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(d, NULL, idx, PLOOP_MAX_DELTAS);
  if (n < 0)
    goto out;
  if (n >= (int)PLOOP_MAX_DELTAS - 1) {
    ploop_error(PLOOP_ERR_PARAM, EMLINK, "%s: at most %u snapshots", d->dir, PLOOP_MAX_DELTAS - 2);
    goto out;
  }
  if (pick_guid(d, guid, g) < 0 || new_delta_name(d, file, sizeof file) < 0)
    goto out;
  /* Opening validates the top and refuses one marked in use. */
  top = delta_open_image(d, ploop_descriptor_find_image(d, PLOOP_TOP_GUID), PLOOP_OPEN_RDONLY);
  if (!top)
    goto out;
  snprintf(path, sizeof path, "%s/%s", d->dir, file);
  struct ploop_delta_create_params p = {
      .size_bytes = top->raw ? d->size_sectors * 512 : top->h.size_sectors * 512,
      .cluster_sectors = d->cluster_sectors,
      .version = top->raw ? 2 : top->h.version,
  };
  int tfd;
  struct store_obj nso;
  if (delta_create_file_nosync(d->dir, path, &p, false, &nso) < 0)
    goto out;
  descriptor_rename_guid(d, PLOOP_TOP_GUID, g);
  snprintf(d->top_guid, sizeof d->top_guid, "%s", PLOOP_TOP_GUID);
  if (descriptor_add_image(d, PLOOP_TOP_GUID, file, g) < 0 || descriptor_write_tmp(d, &tfd) < 0) {
    store_close(&nso);
    store_remove(d->dir, path);
    goto out;
  }
  /* Two syncs at once (the new delta, the descriptor), then the rename. */
  struct store_obj *objs[1] = {&nso};
  int src = store_flush_all(objs, 1, &tfd, 1);
  store_close(&nso);
  if (src < 0) {
    descriptor_abort_tmp(d, tfd);
    store_remove(d->dir, path);
    goto out;
  }
  ploop_fault_point("snapshot-synced");
  if (descriptor_commit_tmp(d, tfd, true) < 0) {
    store_remove(d->dir, path);
    goto out;
  }
  if (out)
    snprintf(out, PLOOP_UUID_LEN + 1, "%s", g);
  rc = 0;
out:
  delta_close(top, false);
  ploop_unlock_disk(lock);
  ploop_descriptor_free(d);
  return rc;
}

/* Loads the descriptor with the disk lock held; *LOCK receives the lock fd. */
struct ploop_descriptor *descriptor_load_locked(const char *dir_or_xml, int *lock, unsigned what)
{
  struct ploop_descriptor *d = ploop_descriptor_load(dir_or_xml);
  if (!d)
    return NULL;
  *lock = ploop_lock_disk(d->dir, what);
  if (*lock < 0) {
    ploop_descriptor_free(d);
    return NULL;
  }
  /* Reload under the lock: someone may have changed it meanwhile. */
  struct ploop_descriptor *d2 = ploop_descriptor_load(d->dir);
  ploop_descriptor_free(d);
  if (!d2) {
    ploop_unlock_disk(*lock);
    *lock = -1;
  }
  return d2;
}

int ploop_snapshot_switch(const char *dir_or_xml, const char *guid)
{
  char g[PLOOP_UUID_LEN + 1], file[1024], path[4096];
  if (ploop_uuid_normalize(guid, g) < 0)
    return -1;
  int lock;
  struct ploop_descriptor *d =
      descriptor_load_locked(dir_or_xml, &lock, PLOOP_LOCK_WRITER | PLOOP_LOCK_DELTAS);
  if (!d)
    return -1;
  int rc = -1;
  char *old_top = NULL;
  struct ploop_delta *snap = NULL;
  const struct ploop_image_desc *im = ploop_descriptor_find_image(d, g);
  if (!strcmp(g, PLOOP_TOP_GUID)) {
    ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: %s is the current top, not a snapshot", d->dir, g);
    goto out;
  }
  if (!im) {
    ploop_error(PLOOP_ERR_NOSNAP, ENOENT, "%s: no snapshot %s", d->dir, g);
    goto out;
  }
  struct ploop_snapshot_desc *sh = descriptor_find_shot(d, g);
  if (sh->temporary) {
    ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: snapshot %s is being merged", d->dir, g);
    goto out;
  }
  snap = delta_open_image(d, im, PLOOP_OPEN_RDONLY);
  if (!snap)
    goto out;
  old_top = ploop_descriptor_image_path(d, ploop_descriptor_find_image(d, PLOOP_TOP_GUID));
  if (!old_top || new_delta_name(d, file, sizeof file) < 0)
    goto out;
  snprintf(path, sizeof path, "%s/%s", d->dir, file);
  struct ploop_delta_create_params p = {
      .size_bytes = snap->h.size_sectors * 512,
      .cluster_sectors = d->cluster_sectors,
      .version = snap->raw ? 2 : snap->h.version,
  };
  if (delta_create_file(d->dir, path, &p, false) < 0)
    goto out;
  descriptor_remove_image(d, PLOOP_TOP_GUID);
  d->size_sectors = snap->h.size_sectors;
  ploop_chs(d->size_sectors, &d->cylinders, &d->heads, &d->sectors);
  if (descriptor_add_image(d, PLOOP_TOP_GUID, file, g) < 0 || ploop_descriptor_save(d) < 0) {
    store_remove(d->dir, path);
    goto out;
  }
  /* The old top is dropped, as ploop does; a crash before this leaves only an orphan file. */
  if (store_remove(d->dir, old_top) < 0)
    ploop_error_os(old_top, "remove");
  ploop_fault_point("switch-old-top-removed");
  rc = 0;
out:
  delta_close(snap, false);
  free(old_top);
  ploop_unlock_disk(lock);
  ploop_descriptor_free(d);
  return rc;
}

int ploop_snapshot_delete(const char *dir_or_xml, const char *guid)
{
  char g[PLOOP_UUID_LEN + 1];
  if (ploop_uuid_normalize(guid, g) < 0)
    return -1;
  int lock;
  struct ploop_descriptor *d =
      descriptor_load_locked(dir_or_xml, &lock, PLOOP_LOCK_WRITER | PLOOP_LOCK_DELTAS);
  if (!d)
    return -1;
  int rc = -1;
  const struct ploop_image_desc *im = ploop_descriptor_find_image(d, g);
  const char *child = NULL;
  size_t children = descriptor_children(d, g, &child);
  if (!strcmp(g, PLOOP_TOP_GUID)) {
    ploop_error(PLOOP_ERR_PARAM, EINVAL,
                "%s: %s is the current top; it cannot be deleted (see snapshot-switch)", d->dir, g);
  } else if (!im) {
    ploop_error(PLOOP_ERR_NOSNAP, ENOENT, "%s: no snapshot %s", d->dir, g);
  } else if (children > 1) {
    ploop_error(PLOOP_ERR_PARAM, EBUSY, "%s: snapshot %s has %zu child snapshots; delete them first", d->dir,
                g, children);
  } else if (children == 1) {
    char c[PLOOP_UUID_LEN + 1];
    snprintf(c, sizeof c, "%s", child);
    rc = merge_child_into_parent(d, c, NULL, NULL);
  } else {
    char *path = ploop_descriptor_image_path(d, im);
    if (path) {
      descriptor_remove_image(d, g);
      rc = ploop_descriptor_save(d);
      if (rc == 0 && store_remove(d->dir, path) < 0)
        rc = ploop_error_os(path, "remove");
      if (rc == 0)
        ploop_fault_point("delete-leaf-removed");
      free(path);
    }
  }
  ploop_unlock_disk(lock);
  ploop_descriptor_free(d);
  return rc;
}
