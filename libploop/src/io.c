/* libaio batches: queue, submit once, wait for all; parallel syncs; writeback
 * started beside a copy loop. */
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "io.h"
#include "store.h"

/* One idle context kept for the next aio_init: io_destroy waits for an RCU
 * grace period (30-40 ms on a busy host), which a migration paid twice per
 * round (send and receive) inside its frozen window. Process-wide and at
 * most one, so threads that come and go leave at most one context behind;
 * only a context with nothing in flight is kept. */
static struct {
  io_context_t ctx;
  unsigned depth;
  pid_t pid; /* a context belongs to its process's memory: a forked child gets none */
} idle_ctx;
static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;

static bool take_idle(unsigned depth, io_context_t *ctx, unsigned *ctx_depth)
{
  bool got = false;
  pthread_mutex_lock(&idle_mu);
  if (idle_ctx.ctx && idle_ctx.pid != getpid())
    idle_ctx.ctx = 0;
  if (idle_ctx.ctx && idle_ctx.depth >= depth) {
    *ctx = idle_ctx.ctx;
    *ctx_depth = idle_ctx.depth;
    idle_ctx.ctx = 0;
    got = true;
  }
  pthread_mutex_unlock(&idle_mu);
  return got;
}

static bool keep_idle(io_context_t ctx, unsigned depth)
{
  bool kept = false;
  pthread_mutex_lock(&idle_mu);
  if (!idle_ctx.ctx || idle_ctx.pid != getpid()) {
    idle_ctx.ctx = ctx;
    idle_ctx.depth = depth;
    idle_ctx.pid = getpid();
    kept = true;
  }
  pthread_mutex_unlock(&idle_mu);
  return kept;
}

/* One request on a store's own asynchronous I/O. */
struct store_req {
  struct store_aio sa; /* first: the store hands it back */
  struct ploop_aio *a;
  unsigned slot;
  bool streaming;
  const char *path;
};

int aio_init(struct ploop_aio *a, unsigned depth)
{
  memset(a, 0, sizeof *a);
  pthread_mutex_init(&a->smu, NULL);
  pthread_cond_init(&a->scv, NULL);
  a->depth = depth;
  a->sreqs = calloc(depth, sizeof *a->sreqs);
  a->cbs = calloc(depth, sizeof *a->cbs);
  a->ptrs = calloc(depth, sizeof *a->ptrs);
  a->events = calloc(depth, sizeof *a->events);
  a->paths = calloc(depth, sizeof *a->paths);
  a->done_slots = calloc(depth, sizeof *a->done_slots);
  a->done_failed = calloc(depth, sizeof *a->done_failed);
  if (!a->cbs || !a->ptrs || !a->events || !a->paths || !a->done_slots || !a->done_failed || !a->sreqs) {
    aio_destroy(a);
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  }
  if (take_idle(depth, &a->ctx, &a->ctx_depth))
    return 0;
  a->ctx_depth = depth;
  int rc = io_setup((int)depth, &a->ctx);
  if (rc < 0) {
    a->ctx = 0;
    aio_destroy(a);
    return ploop_error(PLOOP_ERR_IO, -rc, "io_setup: %s", strerror(-rc));
  }
  return 0;
}

void aio_destroy(struct ploop_aio *a)
{
  /* The store's threads still hold what is in flight there. */
  pthread_mutex_lock(&a->smu);
  while (a->store_inflight)
    pthread_cond_wait(&a->scv, &a->smu);
  pthread_mutex_unlock(&a->smu);
  pthread_mutex_destroy(&a->smu);
  pthread_cond_destroy(&a->scv);
  free(a->sreqs);
  /* io_destroy also waits for requests still in flight: only an idle one is kept */
  if (a->ctx && (a->inflight || a->n || !keep_idle(a->ctx, a->ctx_depth)))
    io_destroy(a->ctx);
  free(a->cbs);
  free(a->ptrs);
  free(a->events);
  free(a->paths);
  free(a->done_slots);
  free(a->done_failed);
  memset(a, 0, sizeof *a);
}

void aio_queue(struct ploop_aio *a, int fd, const char *path, void *buf, size_t len, uint64_t off, int write)
{
  struct iocb *cb = &a->cbs[a->n];
  if (write)
    io_prep_pwrite(cb, fd, buf, len, (long long)off);
  else
    io_prep_pread(cb, fd, buf, len, (long long)off);
  cb->data = (void *)(uintptr_t)a->n;
  a->ptrs[a->n] = cb;
  a->paths[a->n] = path;
  a->n++;
}

static int sync_io(struct ploop_aio *a, struct store_obj *o, void *buf, size_t len, uint64_t off, int write)
{
  int rc = write ? store_pwrite(o, buf, len, off) : store_pread(o, buf, len, off);
  if (rc < 0 && !a->sync_err)
    a->sync_err = -1; /* the first error's message stays the thread's */
  return rc;
}

/* A store thread (or the starter, when the store finished at once). */
static void store_done(struct store_aio *sa, int rc)
{
  struct store_req *r = (struct store_req *)sa;
  struct ploop_aio *a = r->a;
  pthread_mutex_lock(&a->smu);
  if (rc < 0 && !a->store_errno) {
    a->store_errno = -rc;
    a->store_err_path = r->path;
    a->store_err_off = sa->off;
    a->store_err_write = sa->write;
  }
  if (r->streaming) {
    a->done_slots[a->n_done] = r->slot;
    a->done_failed[a->n_done++] = rc < 0;
  }
  a->store_inflight--;
  pthread_cond_broadcast(&a->scv);
  pthread_mutex_unlock(&a->smu);
}

static void store_start(struct ploop_aio *a, struct store_req *r, struct store_obj *o, void *buf, size_t len,
                        uint64_t off, int write)
{
  r->sa = (struct store_aio){.done = store_done, .buf = buf, .len = len, .off = off, .write = write != 0};
  r->a = a;
  r->path = o->path;
  pthread_mutex_lock(&a->smu);
  a->store_inflight++;
  pthread_mutex_unlock(&a->smu);
  int rc = o->ops->aio(o, &r->sa);
  if (rc < 0)
    store_done(&r->sa, rc); /* not started: fails like a completion */
}

/* The first store failure as the calling thread's error; caller holds SMU. */
static int store_report(struct ploop_aio *a)
{
  if (!a->store_errno)
    return 0;
  int e = a->store_errno;
  a->store_errno = 0;
  return ploop_error(a->store_err_write ? PLOOP_ERR_IO : PLOOP_ERR_READ, e, "%s: %s at %llu: %s",
                     a->store_err_path, a->store_err_write ? "write" : "read",
                     (unsigned long long)a->store_err_off, strerror(e));
}

void aio_queue_obj(struct ploop_aio *a, struct store_obj *o, void *buf, size_t len, uint64_t off, int write)
{
  if (o->fd >= 0) {
    aio_queue(a, o->fd, o->path, buf, len, off, write);
  } else if (o->ops->aio && a->store_n < a->depth) {
    struct store_req *r = &a->sreqs[a->store_n++];
    r->streaming = false;
    store_start(a, r, o, buf, len, off, write);
  } else if (!a->sync_err) {
    sync_io(a, o, buf, len, off, write);
  }
}

void aio_start_obj(struct ploop_aio *a, unsigned slot, struct store_obj *o, void *buf, size_t len,
                   uint64_t off, int write)
{
  if (o->fd >= 0) {
    aio_start(a, slot, o->fd, o->path, buf, len, off, write);
    return;
  }
  if (o->ops->aio) {
    struct store_req *r = &a->sreqs[slot];
    r->slot = slot;
    r->streaming = true;
    store_start(a, r, o, buf, len, off, write);
    return;
  }
  bool failed = sync_io(a, o, buf, len, off, write) < 0;
  pthread_mutex_lock(&a->smu);
  a->done_failed[a->n_done] = failed;
  a->done_slots[a->n_done++] = slot;
  pthread_mutex_unlock(&a->smu);
}

/* Checks one completion: a short read is zero-filled (EOF), a failed or
 * short write is an error, reported only when REPORT (the first error of a
 * batch is the one kept). */
static int aio_check_event(struct ploop_aio *a, const struct io_event *ev, bool report)
{
  struct iocb *cb = ev->obj;
  unsigned idx = (unsigned)(uintptr_t)cb->data;
  long res = (long)ev->res;
  size_t want = cb->u.c.nbytes;
  bool is_write = cb->aio_lio_opcode == IO_CMD_PWRITE;
  if (res < 0) {
    if (report)
      ploop_error(is_write ? PLOOP_ERR_IO : PLOOP_ERR_READ, (int)-res, "%s: %s at %lld: %s", a->paths[idx],
                  is_write ? "write" : "read",
                  cb->u.c.offset, strerror((int)-res));
    return -1;
  }
  if ((size_t)res < want) {
    if (is_write) {
      if (report)
        ploop_error(PLOOP_ERR_IO, EIO, "%s: short write at %lld", a->paths[idx], cb->u.c.offset);
      return -1;
    }
    memset((char *)cb->u.c.buf + res, 0, want - (size_t)res);
  }
  return 0;
}

int aio_run(struct ploop_aio *a)
{
  unsigned total = a->n, submitted = 0, done = 0;
  int err = a->sync_err;
  a->sync_err = 0;
  while (submitted < total) {
    int rc = io_submit(a->ctx, (long)(total - submitted), a->ptrs + submitted);
    if (rc == -EINTR || rc == -EAGAIN)
      continue;
    if (rc < 0) {
      err = ploop_error(PLOOP_ERR_IO, -rc, "%s: io_submit: %s", a->paths[submitted], strerror(-rc));
      break;
    }
    submitted += (unsigned)rc;
  }
  while (done < submitted) {
    int rc = io_getevents(a->ctx, 1, (long)(submitted - done), a->events, NULL);
    if (rc == -EINTR)
      continue;
    if (rc < 0) {
      err = ploop_error(PLOOP_ERR_IO, -rc, "io_getevents: %s", strerror(-rc));
      a->inflight = submitted - done; /* still out: io_destroy must wait for them */
      break;
    }
    for (int i = 0; i < rc; i++)
      if (aio_check_event(a, &a->events[i], !err) < 0)
        err = -1;
    done += (unsigned)rc;
  }
  a->n = 0;
  pthread_mutex_lock(&a->smu);
  while (a->store_inflight)
    pthread_cond_wait(&a->scv, &a->smu);
  if (a->store_errno && !err)
    err = store_report(a);
  a->store_errno = 0;
  pthread_mutex_unlock(&a->smu);
  a->store_n = 0;
  return err;
}

void aio_start(struct ploop_aio *a, unsigned slot, int fd, const char *path, void *buf, size_t len,
               uint64_t off, int write)
{
  struct iocb *cb = &a->cbs[slot];
  if (write)
    io_prep_pwrite(cb, fd, buf, len, (long long)off);
  else
    io_prep_pread(cb, fd, buf, len, (long long)off);
  cb->data = (void *)(uintptr_t)slot;
  a->paths[slot] = path;
  a->ptrs[a->n++] = cb;
  a->inflight++;
}

static int reap(struct ploop_aio *a, unsigned *slots, bool *failed, bool wait);

int aio_reap(struct ploop_aio *a, unsigned *slots, bool *failed)
{
  return reap(a, slots, failed, true);
}

int aio_poll(struct ploop_aio *a, unsigned *slots, bool *failed)
{
  return reap(a, slots, failed, false);
}

/* The results waiting in done_slots; caller holds SMU. */
static int take_done(struct ploop_aio *a, unsigned *slots, bool *failed)
{
  unsigned k = a->n_done;
  memcpy(slots, a->done_slots, k * sizeof *slots);
  memcpy(failed, a->done_failed, k * sizeof *failed);
  a->n_done = 0;
  a->sync_err = 0;
  store_report(a);
  return (int)k;
}

static int reap(struct ploop_aio *a, unsigned *slots, bool *failed, bool wait)
{
  pthread_mutex_lock(&a->smu);
  if (a->n_done || (!a->inflight && !a->n)) {
    /* Only the store's requests (or none) are out: wait for them here. */
    while (wait && !a->n_done && a->store_inflight)
      pthread_cond_wait(&a->scv, &a->smu);
    int k = take_done(a, slots, failed);
    pthread_mutex_unlock(&a->smu);
    return k;
  }
  pthread_mutex_unlock(&a->smu);
  int err = 0;
  while (a->n) {
    int rc = io_submit(a->ctx, (long)a->n, a->ptrs);
    if (rc == -EINTR || rc == -EAGAIN)
      continue;
    if (rc < 0) {
      /* Nothing of the rest went out: hand them back as failed. */
      ploop_error(PLOOP_ERR_IO, -rc, "%s: io_submit: %s", a->paths[(uintptr_t)a->ptrs[0]->data],
                  strerror(-rc));
      unsigned k = 0;
      for (unsigned i = 0; i < a->n; i++) {
        slots[k] = (unsigned)(uintptr_t)a->ptrs[i]->data;
        failed[k++] = true;
      }
      a->inflight -= a->n;
      a->n = 0;
      return (int)k;
    }
    memmove(a->ptrs, a->ptrs + rc, (a->n - (unsigned)rc) * sizeof *a->ptrs);
    a->n -= (unsigned)rc;
  }
  if (!a->inflight)
    return 0;
  int rc;
  struct timespec zero = {0, 0}, tick = {0, 1000000};
  for (;;) {
    /* Both kinds out: libaio's wait cannot see the store's completions,
     * so it waits in 1 ms steps and looks at them between. */
    pthread_mutex_lock(&a->smu);
    bool mixed = a->store_inflight > 0;
    if (a->n_done) {
      int k = take_done(a, slots, failed);
      pthread_mutex_unlock(&a->smu);
      return k;
    }
    pthread_mutex_unlock(&a->smu);
    do
      rc = io_getevents(a->ctx, wait ? 1 : 0, (long)a->inflight, a->events,
                        !wait ? &zero : mixed ? &tick : NULL);
    while (rc == -EINTR);
    if (rc != 0 || !wait)
      break;
  }
  if (rc < 0)
    return ploop_error(PLOOP_ERR_IO, -rc, "io_getevents: %s", strerror(-rc));
  for (int i = 0; i < rc; i++) {
    slots[i] = (unsigned)(uintptr_t)((struct iocb *)a->events[i].obj)->data;
    failed[i] = aio_check_event(a, &a->events[i], !err) < 0;
    if (failed[i])
      err = -1;
  }
  a->inflight -= (unsigned)rc;
  return rc;
}

struct sync_job {
  int fd;
  int err;
};

static void *sync_thread(void *arg)
{
  struct sync_job *j = arg;
  j->err = fdatasync(j->fd) < 0 ? errno : 0;
  return NULL;
}

int sync_all(const int *fds, const char *const *paths, unsigned n)
{
  for (; n > 8; fds += 8, paths += 8, n -= 8)
    if (sync_all(fds, paths, 8) < 0)
      return -1;
  /* One thread per extra file, so the syncs' latencies overlap. (libaio's
   * IOCB_CMD_FDSYNC would do the same, but io_destroy waits for an RCU
   * grace period: ~40 ms, four times what the syncs themselves cost.) */
  struct sync_job jobs[8];
  pthread_t tids[8];
  bool started[8] = {false};
  for (unsigned i = 0; i < n; i++) {
    jobs[i] = (struct sync_job){.fd = fds[i]};
    if (fds[i] < 0) {
      started[i] = true; /* nothing to do: skipped below */
      continue;
    }
    if (i > 0 && pthread_create(&tids[i], NULL, sync_thread, &jobs[i]) == 0)
      started[i] = true;
  }
  for (unsigned i = 0; i < n; i++)
    if (!started[i])
      sync_thread(&jobs[i]);
  for (unsigned i = 1; i < n; i++)
    if (started[i] && fds[i] >= 0)
      pthread_join(tids[i], NULL);
  for (unsigned i = 0; i < n; i++)
    if (jobs[i].err)
      return ploop_error(PLOOP_ERR_IO, jobs[i].err, "%s: fdatasync: %s", paths[i], strerror(jobs[i].err));
  return 0;
}

static void wb_kick(struct wb_kicker *k)
{
  /* Advisory both: a failure shows up in the caller's final sync. */
  sync_file_range(k->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  if (k->drop)
    posix_fadvise(k->fd, 0, 0, POSIX_FADV_DONTNEED);
}

static void *wb_kicker_main(void *arg)
{
  struct wb_kicker *k = arg;
  pthread_mutex_lock(&k->mu);
  for (;;) {
    while (!k->stop && k->asked == k->kicked)
      pthread_cond_wait(&k->cv, &k->mu);
    if (k->asked == k->kicked)
      break;
    uint64_t target = k->asked;
    pthread_mutex_unlock(&k->mu);
    wb_kick(k);
    pthread_mutex_lock(&k->mu);
    k->kicked = target;
    pthread_cond_broadcast(&k->cv);
  }
  pthread_mutex_unlock(&k->mu);
  return NULL;
}

void wb_kicker_start(struct wb_kicker *k, int fd, bool drop)
{
  *k = (struct wb_kicker){.fd = fd, .started = true, .drop = drop};
  pthread_mutex_init(&k->mu, NULL);
  pthread_cond_init(&k->cv, NULL);
  k->threaded = pthread_create(&k->tid, NULL, wb_kicker_main, k) == 0;
}

void wb_kicker_wrote(struct wb_kicker *k, uint64_t bytes)
{
  k->written += bytes;
  if (k->written - k->asked < WB_KICK_BYTES)
    return;
  if (!k->threaded) {
    wb_kick(k);
    k->asked = k->kicked = k->written;
    return;
  }
  pthread_mutex_lock(&k->mu);
  k->asked = k->written;
  pthread_cond_broadcast(&k->cv);
  while (k->written - k->kicked > WB_LAG_BYTES)
    pthread_cond_wait(&k->cv, &k->mu);
  pthread_mutex_unlock(&k->mu);
}

void wb_kicker_stop(struct wb_kicker *k)
{
  if (!k->started)
    return;
  k->started = false;
  if (k->threaded) {
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->tid, NULL);
  }
  pthread_mutex_destroy(&k->mu);
  pthread_cond_destroy(&k->cv);
}
