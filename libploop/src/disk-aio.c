/* Asynchronous I/O on a disk whose store has its own (store_ops.aio: Ceph
 * RBD), for a server that keeps many requests in flight: a request the
 * top delta or one below already holds goes straight to the store, and its
 * completion waits in a queue whose eventfd wakes the caller's loop. */
#include <fcntl.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

struct aio_rec {
  struct store_aio sa; /* first: the store hands it back */
  struct ploop_aio_queue *q;
  struct ploop_disk *disk;
  void *tag;
  int rc;
  struct aio_rec *next; /* free list or done list */
  struct aio_rec *all;  /* every record of the queue */
};

struct ploop_aio_queue {
  int efd;
  /* The completion threads push under MU and write the eventfd under it
   * too: ploop_aio_queue_free takes MU once before it goes, so a thread
   * still in its callback is out of the queue by then. */
  pthread_mutex_t mu;
  struct aio_rec *free, *done, *done_tail, *all;
};

struct ploop_aio_queue *ploop_aio_queue_new(void)
{
  struct ploop_aio_queue *q = calloc(1, sizeof *q);
  if (!q) {
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    return NULL;
  }
  q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (q->efd < 0) {
    ploop_error_os("eventfd", "create");
    free(q);
    return NULL;
  }
  pthread_mutex_init(&q->mu, NULL);
  return q;
}

void ploop_aio_queue_free(struct ploop_aio_queue *q)
{
  if (!q)
    return;
  pthread_mutex_lock(&q->mu);
  pthread_mutex_unlock(&q->mu);
  for (struct aio_rec *r = q->all, *n; r; r = n) {
    n = r->all;
    free(r);
  }
  close(q->efd);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

int ploop_aio_queue_fd(const struct ploop_aio_queue *q)
{
  return q->efd;
}

int ploop_aio_queue_reap(struct ploop_aio_queue *q, void **tags, int *results, unsigned max)
{
  unsigned n = 0;
  pthread_mutex_lock(&q->mu);
  while (q->done && n < max) {
    struct aio_rec *r = q->done;
    q->done = r->next;
    tags[n] = r->tag;
    results[n++] = r->rc;
    r->next = q->free;
    q->free = r;
  }
  if (!q->done) {
    /* Drained: the eventfd is quiet until the next push (which writes it
     * under MU when it finds the list empty). Left readable otherwise. */
    q->done_tail = NULL;
    uint64_t v;
    if (read(q->efd, &v, sizeof v) < 0) {
      /* EAGAIN: nothing was signalled */
    }
  }
  pthread_mutex_unlock(&q->mu);
  return (int)n;
}

static void rec_done(struct store_aio *sa, int rc)
{
  struct aio_rec *r = (struct aio_rec *)sa;
  struct ploop_aio_queue *q = r->q;
  r->rc = rc;
  /* Unpinned first: once the record is in the done list the caller may
   * reap it, finish and close the disk. */
  ploop_disk_unmap(r->disk);
  pthread_mutex_lock(&q->mu);
  r->next = NULL;
  if (q->done_tail) {
    q->done_tail->next = r;
  } else {
    q->done = r;
    uint64_t one = 1;
    if (write(q->efd, &one, sizeof one) < 0) {
      /* cannot overflow: the reaper reads it down to 0 */
    }
  }
  q->done_tail = r;
  pthread_mutex_unlock(&q->mu);
}

static struct aio_rec *rec_get(struct ploop_aio_queue *q)
{
  pthread_mutex_lock(&q->mu);
  struct aio_rec *r = q->free;
  if (r) {
    q->free = r->next;
  } else if ((r = calloc(1, sizeof *r))) {
    r->all = q->all;
    q->all = r;
  }
  pthread_mutex_unlock(&q->mu);
  return r;
}

static void rec_put(struct ploop_aio_queue *q, struct aio_rec *r)
{
  pthread_mutex_lock(&q->mu);
  r->next = q->free;
  q->free = r;
  pthread_mutex_unlock(&q->mu);
}

bool ploop_disk_has_aio(const struct ploop_disk *disk)
{
  return disk->n > 0 && disk->deltas[0]->so.ops && disk->deltas[0]->so.ops->aio;
}

int ploop_disk_aio_start(struct ploop_disk *disk, struct ploop_aio_queue *q, bool write, void *buf,
                         size_t len, uint64_t off, void *tag)
{
  if (write && !disk->rdwr)
    return ploop_error(PLOOP_ERR_PARAM, EROFS, "%s: disk is open read-only", disk->dir);
  if (off > disk->size_bytes || len > disk->size_bytes - off)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: range %llu+%zu is past the disk end (%llu)", disk->dir,
                       (unsigned long long)off, len, (unsigned long long)disk->size_bytes);
  uint64_t cb = disk->cluster_bytes, vc = off / cb, coff = off % cb;
  if (len == 0 || coff + len > cb)
    return 0;
  int rc = 0;
  pthread_rwlock_rdlock(&disk->rw);
  if (__atomic_load_n(&disk->draining, __ATOMIC_SEQ_CST))
    goto out;
  struct ploop_delta *d;
  uint64_t at;
  if (write) {
    d = disk->deltas[0];
    uint64_t o = delta_lookup(d, vc);
    /* A cluster only allocated takes its first write whole (write_in_place). */
    if (!o || (len < cb && delta_unwritten_get(d, DELTA_OFF(o))))
      goto out;
    at = DELTA_OFF(o);
  } else {
    unsigned depth = disk_find(disk, 0, vc, &at);
    if (!depth)
      goto out; /* a hole: zeros without I/O on the synchronous path */
    d = disk->deltas[depth - 1];
  }
  if (!d->so.ops || !d->so.ops->aio)
    goto out;
  struct aio_rec *r = rec_get(q);
  if (!r) {
    rc = ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    goto out;
  }
  r->sa = (struct store_aio){.done = rec_done, .buf = buf, .len = len, .off = at + coff, .write = write};
  r->q = q;
  r->disk = disk;
  r->tag = tag;
  __atomic_add_fetch(&disk->pins, 1, __ATOMIC_SEQ_CST);
  if (write)
    disk_mark_dirty(disk, off, len);
  if (d->so.ops->aio(&d->so, &r->sa) < 0) {
    /* Not started (REQ->done will not run): the synchronous path says why. */
    ploop_disk_unmap(disk);
    rec_put(q, r);
    goto out;
  }
  rc = 1;
out:
  pthread_rwlock_unlock(&disk->rw);
  return rc;
}
