/* The stream receiver's target (stream-receive.h): a new or existing disk
 * in a directory, or an rbd:POOL/NAME disk whose new images are marked
 * (store-rbd-recv.c) until the descriptor, written last, names them. */
#include <dirent.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store-rbd-recv.h"
#include "stream-receive.h"

static int dir_is_empty(const char *dir)
{
  DIR *d = opendir(dir);
  if (!d)
    return ploop_error_os(dir, "open directory");
  struct dirent *e;
  int empty = 1;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      empty = 0;
  closedir(d);
  return empty;
}

/* A full receive builds the disk in a hidden directory beside DIR
 * (".NAME.receive-XXXXXX") and renames it to DIR at the end (rename(2)
 * replaces an empty directory), so even a receive killed half-way leaves
 * DIR as it was. Where DIR is an empty mount point (another file system)
 * the disk is built in DIR itself. */
static int prepare_full_store(struct receiver *r, const char *dir)
{
  char *canon = NULL, *xml = NULL;
  if (store_for(dir)->resolve(dir, &canon, &xml) < 0)
    return -1;
  snprintf(r->dir, sizeof r->dir, "%s", canon);
  snprintf(r->final_dir, sizeof r->final_dir, "%s", canon);
  free(canon);
  free(xml);
  r->store = true;
  if (rbd_recv_prepare_full(r->dir, &r->lock) < 0)
    return -1;
  r->made_lock = true;
  rbd_recv_set_mark(strrchr(r->dir, '/') + 1);
  snprintf(r->base_file, sizeof r->base_file, "%s", PLOOP_DEFAULT_IMAGE_NAME);
  return 0;
}

int recv_prepare_full(struct receiver *r, const char *dir)
{
  if (!store_is_file(store_for(dir)))
    return prepare_full_store(r, dir);
  struct stat sb, pb;
  bool exists = stat(dir, &sb) == 0;
  if (exists) {
    if (!S_ISDIR(sb.st_mode))
      return ploop_error(PLOOP_ERR_PARAM, ENOTDIR, "%s: not a directory", dir);
    int e = dir_is_empty(dir);
    if (e <= 0)
      return e < 0 ? -1
                   : ploop_error(
                         PLOOP_ERR_PARAM, ENOTEMPTY,
                         "%s: not empty; a full stream makes a new disk (an incremental one needs --since)",
                         dir);
  } else if (errno != ENOENT) {
    return ploop_error_os(dir, "stat");
  }
  char *c1 = ploop_strdup(dir), *c2 = ploop_strdup(dir);
  if (!c1 || !c2) {
    free(c1);
    free(c2);
    return -1;
  }
  char parent[PATH_MAX], name[NAME_MAX + 1];
  bool ok = realpath(dirname(c1), parent) != NULL;
  snprintf(name, sizeof name, "%s", basename(c2));
  free(c1);
  free(c2);
  if (!ok)
    return ploop_error_os(dir, "resolve the parent directory");
  if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, "/"))
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: name the new disk's directory", dir);
  if ((size_t)snprintf(r->final_dir, sizeof r->final_dir, "%s/%s", parent, name) >= sizeof r->final_dir)
    return ploop_error(PLOOP_ERR_PARAM, ENAMETOOLONG, "%s: path too long", dir);
  if (!exists || (stat(parent, &pb) == 0 && pb.st_dev == sb.st_dev)) {
    if ((size_t)snprintf(r->dir, sizeof r->dir, "%s/.%.200s.receive-XXXXXX", parent, name) >= sizeof r->dir)
      return ploop_error(PLOOP_ERR_PARAM, ENAMETOOLONG, "%s: path too long", dir);
    if (!mkdtemp(r->dir))
      return ploop_error_os(r->dir, "create directory");
    chmod(r->dir, 0755);
    r->staging = true;
  } else {
    snprintf(r->dir, sizeof r->dir, "%s", r->final_dir);
  }
  r->lock = ploop_lock_disk(r->dir, PLOOP_LOCK_WRITER);
  if (r->lock < 0)
    return -1;
  r->made_lock = true;
  snprintf(r->base_file, sizeof r->base_file, "%s", PLOOP_DEFAULT_IMAGE_NAME);
  return 0;
}

/* The staged disk becomes DIR. */
int recv_publish(struct receiver *r)
{
  if (!r->staging)
    return 0;
  if (rename(r->dir, r->final_dir) < 0)
    return ploop_error(
        errno == ENOTEMPTY || errno == EEXIST ? PLOOP_ERR_BUSY : PLOOP_ERR_IO, errno, "%s: %s", r->final_dir,
        errno == ENOTEMPTY || errno == EEXIST ? "filled by someone else meanwhile" : strerror(errno));
  r->staging = false;
  snprintf(r->dir, sizeof r->dir, "%s", r->final_dir);
  return ploop_fsync_parent(r->final_dir);
}

int recv_prepare_incremental(struct receiver *r, const char *dir)
{
  char xml[PATH_MAX];
  struct stat sb;
  snprintf(xml, sizeof xml, "%s/%s", dir, PLOOP_DESCRIPTOR_NAME);
  r->store = !store_is_file(store_for(dir));
  if (!r->store && (stat(dir, &sb) < 0 || (S_ISDIR(sb.st_mode) && access(xml, F_OK) < 0)))
    return ploop_error(PLOOP_ERR_NOTFOUND, ENOENT,
                       "%s: no disk here; an incremental stream applies to a copy that holds snapshot %s",
                       dir, r->h.base_guid);
  r->desc = descriptor_load_locked(dir, &r->lock, PLOOP_LOCK_WRITER);
  if (!r->desc)
    return -1;
  struct ploop_descriptor *d = r->desc;
  snprintf(r->dir, sizeof r->dir, "%s", d->dir);
  if (r->store)
    rbd_recv_set_mark(strrchr(r->dir, '/') + 1);
  const char *base = r->h.base_guid;
  if (ploop_descriptor_find_image(d, r->h.guid))
    return ploop_error(PLOOP_ERR_PARAM, EEXIST, "%s: already holds snapshot %s", d->dir, r->h.guid);
  struct ploop_snapshot_desc *top = descriptor_find_shot(d, PLOOP_TOP_GUID);
  const struct ploop_image_desc *tim = ploop_descriptor_find_image(d, PLOOP_TOP_GUID);
  if (!ploop_descriptor_find_image(d, base))
    return ploop_error(PLOOP_ERR_NOTFOUND, ENOENT, "%s: has no snapshot %s, the stream's base", d->dir, base);
  if (!top || !tim || strcmp(top->parent, base))
    return ploop_error(PLOOP_ERR_PARAM, EINVAL,
                       "%s: snapshot %s is not the newest, cannot apply an incremental stream", d->dir, base);
  if ((uint64_t)d->cluster_sectors * 512 != r->h.cluster_bytes)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: cluster size %u bytes differs from the stream's %u",
                       d->dir, d->cluster_sectors * 512, r->h.cluster_bytes);
  /* The top must be empty: anything written since the snapshot would be
   * lost, or mixed with the stream's clusters. */
  struct ploop_delta *t = delta_open_image(d, tim, PLOOP_OPEN_RDONLY);
  if (!t)
    return -1;
  uint64_t held = delta_count_allocated(t);
  delta_close(t, false);
  if (held)
    return ploop_error(PLOOP_ERR_PARAM, EBUSY,
                       "%s: changed since snapshot %s, cannot apply an incremental stream", d->dir, base);
  char *p = ploop_descriptor_image_path(d, tim);
  if (!p)
    return -1;
  snprintf(r->old_top, sizeof r->old_top, "%s", p);
  free(p);
  size_t idx[PLOOP_MAX_DELTAS];
  if (ploop_descriptor_chain(d, NULL, idx, PLOOP_MAX_DELTAS) < 0)
    return -1;
  const char *bf = d->images[idx[0]].file;
  if (strlen(bf) >= sizeof r->base_file)
    return ploop_error(PLOOP_ERR_PARAM, ENAMETOOLONG, "%s: base image name %s too long for new deltas",
                       d->dir, bf);
  memcpy(r->base_file, bf, strlen(bf) + 1);
  return 0;
}

/* Nothing of a failed receive stays: the new files go, and the staging
 * directory of a full receive. The disk's descriptor was never changed. */
void recv_remove_new(struct receiver *r, const char *path)
{
  if (r->store)
    rbd_recv_remove_marked(r->dir, path);
  else if (access(path, F_OK) == 0)
    unlink(path);
}

void recv_adopt(struct receiver *r)
{
  rbd_recv_set_mark(NULL);
  if (!r->store)
    return;
  /* Best effort: a mark left on an image the descriptor names is never
   * acted on (a receive clears leftovers only where no disk exists). */
  for (unsigned i = 0; i < r->n_layers; i++)
    rbd_recv_unmark(r->dir, r->layers[i].path);
  if (r->made_top)
    rbd_recv_unmark(r->dir, r->top_path);
}

void recv_undo(struct receiver *r)
{
  rbd_recv_set_mark(NULL);
  if (r->dev >= 0)
    return; /* the device keeps what was written: its caller discards it */
  for (unsigned i = 0; i < r->n_layers; i++) {
    if (r->layers[i].d)
      r->layers[i].d->rdwr = false; /* going away: nothing to flush into it */
    delta_close(r->layers[i].d, false);
    r->layers[i].d = NULL;
    recv_remove_new(r, r->layers[i].path);
  }
  if (r->made_top)
    recv_remove_new(r, r->top_path);
  if (r->store)
    return; /* the lock object goes once unlocked (receive) */
  if (r->full && r->made_lock) {
    static const char *const ours[] = {PLOOP_DESCRIPTOR_NAME ".lck", PLOOP_DESCRIPTOR_NAME ".tmp",
                                       PLOOP_DESCRIPTOR_NAME};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
      /* The descriptor itself only in the staging directory: in DIR it would be someone else's. */
      if (i == 2 && !r->staging)
        break;
      char p[PATH_MAX + 64];
      snprintf(p, sizeof p, "%s/%s", r->dir, ours[i]);
      unlink(p);
    }
  }
  if (r->staging)
    rmdir(r->dir);
}

