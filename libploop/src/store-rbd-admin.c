/* The RBD store's administration (store-rbd.h): fencing a disk's holder,
 * whether a disk exists, removing a whole disk. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "store.h"
#include "store-rbd.h"

/* Fences whoever holds disk DIR: its top image's exclusive lock is broken
 * (librbd blocklists the holder, whose next write fails) and the disk's
 * RADOS locks are broken too. */
int ploop_rbd_lock_break(const char *dir, char *holder, size_t holder_len)
{
  struct ploop_descriptor *d = ploop_descriptor_load(dir);
  if (!d)
    return -1;
  const struct ploop_image_desc *top = ploop_descriptor_find_image(d, PLOOP_TOP_GUID);
  char *path = top ? ploop_descriptor_image_path(d, top) : NULL;
  struct rbd_loc l;
  char image[512];
  rados_ioctx_t io;
  int rc = -1;
  if (holder_len)
    holder[0] = 0;
  if (!path || rbd_image_of(d->dir, path, &l, image, sizeof image) < 0 || rbd_connect_pool(&l, NULL, &io) < 0)
    goto out;
  rbd_image_t img;
  int r = rbd_open(io, image, &img, NULL);
  if (r < 0) {
    rbd_fail("open image", path, r);
    goto out_io;
  }
  char *owners[8];
  size_t n = 8;
  rbd_lock_mode_t mode;
  r = rbd_lock_get_owners(img, &mode, owners, &n);
  if (r == 0) {
    for (size_t i = 0; i < n && r == 0; i++) {
      if (holder_len && !holder[0])
        snprintf(holder, holder_len, "%s", owners[i]);
      r = rbd_lock_break(img, mode, owners[i]);
    }
    rbd_lock_get_owners_cleanup(owners, n);
  } else if (r == -ENOENT) {
    r = 0; /* nobody holds the image */
  }
  rbd_close(img);
  if (r < 0) {
    rbd_fail("break the image lock", path, r);
    goto out_io;
  }
  /* The disk lock: whoever holds it is fenced now (blocklisted above, or
   * gone); its RADOS locks are removed so that a new writer can start. */
  char oid[512];
  snprintf(oid, sizeof oid, "%s.lock", l.name);
  static const char *const names[] = {"writer", "deltas"};
  for (unsigned k = 0; k < 2; k++) {
    char tag[256], clients[1024], cookies[1024], addrs[1024];
    size_t tl = sizeof tag, cl = sizeof clients, kl = sizeof cookies, al = sizeof addrs;
    int excl;
    ssize_t m = rados_list_lockers(io, oid, names[k], &excl, tag, &tl, clients, &cl, cookies, &kl, addrs, &al);
    const char *c = clients, *ck = cookies;
    for (ssize_t i = 0; i < m; i++) {
      if (holder_len && !holder[0])
        snprintf(holder, holder_len, "%s", c);
      rados_break_lock(io, oid, names[k], c, ck);
      c += strlen(c) + 1;
      ck += strlen(ck) + 1;
    }
  }
  rc = 0;
out_io:
  rados_ioctx_destroy(io);
out:
  free(path);
  ploop_descriptor_free(d);
  return rc;
}

/* 1: disk DIR (rbd:POOL/NAME) has a descriptor, 0: none, -1: error. */
int rbd_disk_exists(const char *dir)
{
  rados_ioctx_t io;
  char oid[512];
  if (rbd_desc_open(dir, &io, oid, sizeof oid) < 0)
    return -1;
  uint64_t size;
  time_t mtime;
  int rc = rados_stat(io, oid, &size, &mtime);
  rados_ioctx_destroy(io);
  if (rc == -ENOENT)
    return 0;
  return rc < 0 ? rbd_fail("stat descriptor", dir, rc) : 1;
}

/* Removes disk DIR whole: every image of its descriptor, the descriptor
 * object and its lock object. Refused (busy) while anyone holds it. */
int ploop_rbd_disk_remove(const char *dir)
{
  int lock = store_rbd_ops.lock(dir, PLOOP_LOCK_WRITER);
  if (lock == -1)
    return -1;
  struct ploop_descriptor *d = ploop_descriptor_load(dir);
  int rc = d ? 0 : -1;
  for (size_t i = 0; d && i < d->n_images && rc == 0; i++) {
    char *path = ploop_descriptor_image_path(d, &d->images[i]);
    if (!path || (store_rbd_ops.remove(d->dir, path) < 0 && errno != ENOENT))
      rc = path ? ploop_error(PLOOP_ERR_IO, errno, "%s: remove image: %s", path, strerror(errno)) : -1;
    free(path);
  }
  ploop_descriptor_free(d);
  rados_ioctx_t io;
  char oid[512];
  if (rc == 0 && rbd_desc_open(dir, &io, oid, sizeof oid) == 0) {
    int r = rados_remove(io, oid);
    if (r < 0 && r != -ENOENT)
      rc = rbd_fail("remove descriptor", dir, r);
    rados_ioctx_destroy(io);
  } else if (rc == 0) {
    rc = -1;
  }
  ploop_unlock_disk(lock);
  struct rbd_loc l;
  if (rc == 0 && rbd_parse_loc(dir, &l) == 0 && rbd_connect_pool(&l, NULL, &io) == 0) {
    snprintf(oid, sizeof oid, "%s.lock", l.name);
    rados_remove(io, oid); /* only a name left; a new disk makes it again */
    rados_ioctx_destroy(io);
  }
  return rc;
}
