/* The RBD store's side of `ploop receive rbd:POOL/NAME` (store-rbd-recv.h):
 * every image a receive creates carries the metadata ploop.receiving=NAME
 * from its creation until the descriptor names it, so that what a killed
 * receive left can be told from anyone else's images and removed. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "store-rbd.h"
#include "store-rbd-recv.h"

#define RECV_MARK_KEY "ploop.receiving"

int rbd_disk_exists(const char *dir); /* store-rbd-admin.c */

/* Calls only this file makes, resolved from the libraries store-rbd.c
 * loaded (RTLD_GLOBAL) by the time a pool is connected. */
struct recv_lib {
  __typeof__(&rbd_metadata_set) metadata_set;
  __typeof__(&rbd_metadata_get) metadata_get;
  __typeof__(&rbd_metadata_remove) metadata_remove;
  __typeof__(&rbd_list2) list2;
  __typeof__(&rbd_image_spec_list_cleanup) list_cleanup;
  __typeof__(&rbd_watchers_list) watchers_list;
  __typeof__(&rbd_watchers_list_cleanup) watchers_cleanup;
  __typeof__(&rados_blocklist_add) blocklist_add;
};

static int recv_lib(struct recv_lib *f)
{
#define SYM(field, name)                                                                                     \
  if (!(f->field = (__typeof__(f->field))dlsym(RTLD_DEFAULT, name)))                                         \
    return ploop_error(PLOOP_ERR_PARAM, ENOPKG, "rbd: %s missing in Ceph's client libraries", name);
  SYM(metadata_set, "rbd_metadata_set")
  SYM(metadata_get, "rbd_metadata_get")
  SYM(metadata_remove, "rbd_metadata_remove")
  SYM(list2, "rbd_list2")
  SYM(list_cleanup, "rbd_image_spec_list_cleanup")
  SYM(watchers_list, "rbd_watchers_list")
  SYM(watchers_cleanup, "rbd_watchers_list_cleanup")
  SYM(blocklist_add, "rados_blocklist_add")
#undef SYM
  return 0;
}

/* Per thread: the receive running on this thread marks what the store's
 * create makes on it; no other thread's creates are touched. */
static __thread char recv_mark[256];

void rbd_recv_set_mark(const char *name)
{
  snprintf(recv_mark, sizeof recv_mark, "%s", name ? name : "");
}

int rbd_recv_mark_new(struct store_obj *o, void *img)
{
  struct recv_lib f;
  if (!recv_mark[0])
    return 0;
  if (recv_lib(&f) < 0)
    return -1;
  int rc = f.metadata_set((rbd_image_t)img, RECV_MARK_KEY, recv_mark);
  return rc < 0 ? rbd_fail("mark the new image", o->path, rc) : 0;
}

/* IMAGE's mark into VALUE ("" when unmarked); -errno on failure. */
static int read_mark(const struct recv_lib *f, rados_ioctx_t io, const char *image, char *value, size_t len)
{
  rbd_image_t img;
  value[0] = 0;
  int rc = rbd_open_read_only(io, image, &img, NULL);
  if (rc < 0)
    return rc;
  size_t n = len;
  rc = f->metadata_get(img, RECV_MARK_KEY, value, &n);
  rbd_close(img);
  if (rc == -ENOENT) {
    value[0] = 0;
    return 0;
  }
  if (rc < 0)
    value[0] = 0;
  return rc < 0 ? rc : 0;
}

int rbd_recv_unmark(const char *dir, const char *path)
{
  struct recv_lib f;
  struct rbd_loc l;
  char image[512];
  rados_ioctx_t io;
  if (recv_lib(&f) < 0 || rbd_image_of(dir, path, &l, image, sizeof image) < 0 ||
      rbd_connect_pool(&l, NULL, &io) < 0)
    return -1;
  rbd_image_t img;
  int rc = rbd_open(io, image, &img, NULL);
  if (rc == 0) {
    rc = f.metadata_remove(img, RECV_MARK_KEY);
    rbd_close(img);
  }
  rados_ioctx_destroy(io);
  return rc < 0 && rc != -ENOENT ? rbd_fail("unmark", path, rc) : 0;
}

/* Fences whoever still watches IMAGE (a killed receiver's handle holds a
 * watch until the OSD times it out), then removes it; bounded retries. */
static int remove_fenced(const struct recv_lib *f, rados_t cluster, rados_ioctx_t io, const char *image)
{
  int rc = -EBUSY;
  for (int attempt = 0; attempt < 50 && rc == -EBUSY; attempt++) {
    rbd_image_t img;
    if (rbd_open_read_only(io, image, &img, NULL) == 0) {
      rbd_image_watcher_t w[16];
      size_t n = 16;
      if (f->watchers_list(img, w, &n) == 0) {
        for (size_t i = 0; i < n; i++)
          f->blocklist_add(cluster, w[i].addr, 3600);
        f->watchers_cleanup(w, n);
      }
      rbd_close(img);
    }
    rc = rbd_remove(io, image);
    if (rc == -EBUSY)
      usleep(100 * 1000);
  }
  return rc == -ENOENT ? 0 : rc;
}

int rbd_recv_remove_marked(const char *dir, const char *path)
{
  struct recv_lib f;
  struct rbd_loc l;
  char image[512], mark[256];
  rados_ioctx_t io;
  rados_t cluster;
  if (recv_lib(&f) < 0 || rbd_image_of(dir, path, &l, image, sizeof image) < 0 ||
      rbd_connect_pool(&l, &cluster, &io) < 0)
    return -1;
  int rc = read_mark(&f, io, image, mark, sizeof mark);
  if (rc == 0 && !strcmp(mark, l.name))
    rc = remove_fenced(&f, cluster, io, image);
  rados_ioctx_destroy(io);
  return rc == -ENOENT ? 0 : rc < 0 ? rbd_fail("remove", path, rc) : 0;
}

/* "ploop-PID@HOST" of a process on this host that is gone. */
static bool holder_dead(const char *cookie)
{
  char host[48] = ""; /* as store-rbd.c's lock_cookie writes it */
  int pid = 0, end = 0;
  if (sscanf(cookie, "ploop-%d@%n", &pid, &end) < 1 || !end || pid <= 0)
    return false;
  gethostname(host, sizeof host - 1);
  if (strcmp(cookie + end, host))
    return false;
  return kill(pid, 0) < 0 && errno == ESRCH;
}

/* Breaks the disk lock when every holder is a dead receiver of this host:
 * its client is blocklisted (fenced) and its locks on OID broken. 1: broken. */
static int break_dead_lock(rados_t cluster, rados_ioctx_t io, const char *oid)
{
  static const char *const names[] = {"writer", "deltas"};
  int broke = 0;
  for (unsigned k = 0; k < 2; k++) {
    char tag[256], clients[1024], cookies[1024], addrs[1024];
    size_t tl = sizeof tag, cl = sizeof clients, kl = sizeof cookies, al = sizeof addrs;
    int excl;
    ssize_t m = rados_list_lockers(io, oid, names[k], &excl, tag, &tl, clients, &cl, cookies, &kl, addrs, &al);
    const char *ck = cookies;
    for (ssize_t i = 0; i < m; i++, ck += strlen(ck) + 1)
      if (!holder_dead(ck))
        return 0;
    const char *c = clients, *a = addrs;
    ck = cookies;
    struct recv_lib f;
    for (ssize_t i = 0; i < m && recv_lib(&f) == 0; i++) {
      f.blocklist_add(cluster, (char *)a, 3600);
      rados_break_lock(io, oid, names[k], c, ck);
      c += strlen(c) + 1;
      ck += strlen(ck) + 1;
      a += strlen(a) + 1;
      broke = 1;
    }
  }
  return broke;
}

/* Images of disk NAME a killed receive left: removed when marked for NAME;
 * NAME.root.hds unmarked is someone else's and refuses the receive. */
static int clear_leftovers(const char *dir, const struct rbd_loc *l, rados_t cluster, rados_ioctx_t io)
{
  struct recv_lib f;
  if (recv_lib(&f) < 0)
    return -1;
  size_t n = 64;
  rbd_image_spec_t *specs = NULL;
  int rc;
  for (int tries = 0; tries < 8; tries++) {
    free(specs);
    specs = calloc(n, sizeof *specs);
    if (!specs)
      return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    rc = f.list2(io, specs, &n);
    if (rc != -ERANGE)
      break;
  }
  if (rc < 0) {
    free(specs);
    return rbd_fail("list images", dir, rc);
  }
  char prefix[300], root[300];
  snprintf(prefix, sizeof prefix, "%s.", l->name);
  snprintf(root, sizeof root, "%s.%s", l->name, PLOOP_DEFAULT_IMAGE_NAME);
  bool *ours = calloc(n + 1, sizeof *ours);
  rc = ours ? 0 : ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  /* Every image looked at before one is removed: a refusal changes nothing. */
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (strncmp(specs[i].name, prefix, strlen(prefix)))
      continue;
    char mark[256];
    int r = read_mark(&f, io, specs[i].name, mark, sizeof mark);
    if (r < 0 && r != -ENOENT)
      rc = rbd_fail("read the image's metadata", specs[i].name, r);
    else if (!strcmp(mark, l->name))
      ours[i] = true;
    else if (!strcmp(specs[i].name, root))
      rc = ploop_error(PLOOP_ERR_PARAM, EEXIST,
                       "%s: image %s is in the way (not left by a ploop receive); remove it or use another name",
                       dir, specs[i].name);
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    int r = ours[i] ? remove_fenced(&f, cluster, io, specs[i].name) : 0;
    if (r < 0)
      rc = rbd_fail("remove a killed receive's image", specs[i].name, r);
  }
  free(ours);
  f.list_cleanup(specs, n);
  free(specs);
  return rc;
}

int rbd_recv_prepare_full(const char *dir, int *lock)
{
  struct rbd_loc l;
  rados_t cluster;
  rados_ioctx_t io;
  *lock = -1;
  if (rbd_parse_loc(dir, &l) < 0 || rbd_connect_pool(&l, &cluster, &io) < 0)
    return -1;
  int rc = -1;
  int k = ploop_lock_disk(dir, PLOOP_LOCK_WRITER);
  if (k < 0 && ploop_get_errno() == EBUSY) {
    char oid[512];
    snprintf(oid, sizeof oid, "%s.lock", l.name);
    if (break_dead_lock(cluster, io, oid) > 0)
      k = ploop_lock_disk(dir, PLOOP_LOCK_WRITER);
  }
  if (k < 0)
    goto out;
  int e = rbd_disk_exists(dir);
  if (e != 0) {
    if (e > 0)
      ploop_error(PLOOP_ERR_PARAM, ENOTEMPTY,
                  "%s: a disk exists; a full stream makes a new disk (an incremental one needs --since)", dir);
    ploop_unlock_disk(k);
    goto out;
  }
  if (clear_leftovers(dir, &l, cluster, io) < 0) {
    ploop_unlock_disk(k);
    rbd_recv_forget_lock(dir); /* no disk here: the lock object was only ours */
    goto out;
  }
  *lock = k;
  rc = 0;
out:
  rados_ioctx_destroy(io);
  return rc;
}

void rbd_recv_forget_lock(const char *dir)
{
  struct rbd_loc l;
  rados_ioctx_t io;
  if (rbd_parse_loc(dir, &l) < 0 || rbd_connect_pool(&l, NULL, &io) < 0)
    return;
  char oid[512];
  snprintf(oid, sizeof oid, "%s.lock", l.name);
  rados_remove(io, oid); /* only a name; a new disk makes it again */
  rados_ioctx_destroy(io);
}
