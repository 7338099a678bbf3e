/* The RBD store's grow-ahead: a delta's appends resize its image in doubling steps
 * (4 MiB up to 256 MiB), not a cluster at a time; the image is cut back to
 * the delta's end when it is sealed or closed (store_rbd_trim) and at the
 * next read-write open after a kill (delta.c: the BAT says where data
 * ends). Bytes between r->size and r->img_size are always zeros: the image
 * only grows there, and a cut is exact. */
#include <errno.h>
#include <pthread.h>

#include "internal.h"
#include "store-rbd.h"
#include "store-rbd-recv.h"

int rbd_no_progress(uint64_t done, uint64_t total, void *arg)
{
  (void)done, (void)total, (void)arg;
  return 0;
}

#define GROW_STEP_MIN (4ull << 20)
#define GROW_STEP_MAX (256ull << 20)

int rbd_resize_exact_locked(struct rbd_obj *r, uint64_t bytes)
{
  if (bytes == r->img_size)
    return 0;
  int rc = rbd_resize2(r->img, bytes, true, rbd_no_progress, NULL);
  if (rc == 0)
    r->img_size = bytes;
  return rc;
}

/* The image at least END bytes long. Only a handle holding the image's lock
 * grows ahead: it is the one that cuts back on close (a creating handle may
 * have handed the lock on). */
int rbd_grow_ahead_locked(struct rbd_obj *r, uint64_t end)
{
  if (end <= r->img_size)
    return 0;
  if (!r->locked)
    return rbd_resize_exact_locked(r, end);
  uint64_t step = r->grow_step ? r->grow_step : GROW_STEP_MIN;
  uint64_t want = round_up(end > r->img_size + step ? end : r->img_size + step, 1ull << RBD_ORDER);
  int rc = rbd_resize2(r->img, want, false, rbd_no_progress, NULL);
  if (rc < 0) /* e.g. a quota: ask for what is needed only */
    return rbd_resize_exact_locked(r, end);
  r->img_size = want;
  r->grow_step = step * 2 > GROW_STEP_MAX ? GROW_STEP_MAX : step * 2;
  return 0;
}

/* The image cut back to the delta's end (seal, close). */
int store_rbd_trim(struct store_obj *o)
{
  struct rbd_obj *r = o->ops == &store_rbd_ops ? o->priv : NULL;
  if (!r || !r->locked)
    return 0;
  pthread_mutex_lock(&r->grow);
  int rc = rbd_resize_exact_locked(r, r->size);
  pthread_mutex_unlock(&r->grow);
  return rc < 0 ? rbd_fail("cut to the delta's end", o->path, rc) : 0;
}

