/* Unit tests for asynchronous disk I/O (ploop_disk_aio_start and the
 * completion queue): which requests go to the store's own aio, how their
 * completions come back through the eventfd, and that structure changes
 * wait for them. The store's aio is a fake over the file store, completed
 * when the test says so. */
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "helpers.h"
#include "internal.h"

#define CL (64u << 10)
#define DISK_SIZE (4u << 20)

TestSuite(disk_aio, .init = tmpdir_setup, .fini = tmpdir_teardown);

static struct store_ops fake_ops;
static struct store_obj *pending_obj;
static struct store_aio *pending;

static int fake_aio(struct store_obj *o, struct store_aio *req)
{
  cr_assert_null(pending, "one request at a time in these tests");
  pending_obj = o;
  pending = req;
  return 0;
}

/* The store finishes the request it holds. */
static void complete_pending(void)
{
  struct store_aio *r = pending;
  cr_assert_not_null(r);
  pending = NULL;
  ssize_t n = r->write ? pwrite(pending_obj->fd, r->buf, r->len, (off_t)r->off)
                       : pread(pending_obj->fd, r->buf, r->len, (off_t)r->off);
  r->done(r, n == (ssize_t)r->len ? 0 : -EIO);
}

static struct ploop_disk *open_disk_with_fake_aio(void)
{
  make_disk(DISK_SIZE, CL / 512);
  struct ploop_disk *disk = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  cr_assert(!ploop_disk_has_aio(disk), "the file store has no aio of its own");
  fake_ops = *disk->deltas[0]->so.ops;
  fake_ops.aio = fake_aio;
  disk->deltas[0]->so.ops = &fake_ops;
  cr_assert(ploop_disk_has_aio(disk));
  return disk;
}

static void close_disk(struct ploop_disk *disk)
{
  for (unsigned i = 0; i < disk->n; i++)
    if (disk->deltas[i]->so.ops == &fake_ops)
      disk->deltas[i]->so.ops = &store_file_ops;
  OK(ploop_disk_close(disk));
}

static uint8_t *aligned_buf(size_t len, int fill)
{
  void *p = NULL;
  cr_assert_eq(posix_memalign(&p, 4096, len), 0);
  memset(p, fill, len);
  return p;
}

static bool readable(int fd)
{
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  return poll(&pf, 1, 0) == 1;
}

Test(disk_aio, in_place_writes_and_reads_complete_through_the_queue)
{
  struct ploop_disk *disk = open_disk_with_fake_aio();
  struct ploop_aio_queue *q = NOTNULL(ploop_aio_queue_new());
  uint8_t *a = aligned_buf(CL, 0x11), *b = aligned_buf(4096, 0x22), *r = aligned_buf(4096, 0);
  int tag_w, tag_r;
  void *tags[4];
  int res[4];
  cr_assert_eq(ploop_disk_aio_start(disk, q, true, b, 4096, 4096, &tag_w), 0,
               "a write into a hole allocates: the synchronous path's job");
  cr_assert_eq(ploop_disk_aio_start(disk, q, false, r, 4096, 4096, &tag_r), 0,
               "a hole reads as zeros at once");
  OK(ploop_disk_pwrite(disk, a, CL, 0, 0));
  cr_assert_eq(ploop_disk_aio_start(disk, q, true, b, 4096, CL - 2048, &tag_w), 0, "a range across clusters");
  cr_assert_eq(ploop_disk_aio_start(disk, q, true, b, 4096, DISK_SIZE, &tag_w), -1, "past the end");

  cr_assert_eq(ploop_disk_aio_start(disk, q, true, b, 4096, 4096, &tag_w), 1);
  cr_assert(!readable(ploop_aio_queue_fd(q)));
  cr_assert_eq(ploop_aio_queue_reap(q, tags, res, 4), 0);
  complete_pending();
  cr_assert(readable(ploop_aio_queue_fd(q)), "a completion wakes the loop");
  cr_assert_eq(ploop_aio_queue_reap(q, tags, res, 4), 1);
  cr_assert_eq(tags[0], &tag_w);
  cr_assert_eq(res[0], 0);
  cr_assert(!readable(ploop_aio_queue_fd(q)), "quiet again once drained");
  OK(ploop_disk_pread(disk, r, 4096, 4096));
  cr_assert_arr_eq(r, b, 4096);

  memset(r, 0, 4096);
  cr_assert_eq(ploop_disk_aio_start(disk, q, false, r, 4096, 4096, &tag_r), 1);
  complete_pending();
  cr_assert_eq(ploop_aio_queue_reap(q, tags, res, 4), 1);
  cr_assert_eq(tags[0], &tag_r);
  cr_assert_eq(res[0], 0);
  cr_assert_arr_eq(r, b, 4096);
  ploop_aio_queue_free(q);
  close_disk(disk);
  free(a);
  free(b);
  free(r);
}

struct snap_arg {
  struct ploop_disk *disk;
  int rc;
  volatile int done;
};

static void *take_snapshot(void *p)
{
  struct snap_arg *s = p;
  char guid[PLOOP_UUID_LEN + 1];
  s->rc = ploop_disk_snapshot(s->disk, NULL, guid);
  s->done = 1;
  return NULL;
}

Test(disk_aio, a_snapshot_waits_for_requests_in_flight)
{
  struct ploop_disk *disk = open_disk_with_fake_aio();
  struct ploop_aio_queue *q = NOTNULL(ploop_aio_queue_new());
  uint8_t *a = aligned_buf(CL, 0x33), *b = aligned_buf(4096, 0x44);
  int tag;
  void *tags[2];
  int res[2];
  OK(ploop_disk_pwrite(disk, a, CL, 0, 0));
  cr_assert_eq(ploop_disk_aio_start(disk, q, true, b, 4096, 0, &tag), 1);
  struct snap_arg s = {disk, -2, 0};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, take_snapshot, &s), 0);
  usleep(200 * 1000);
  cr_assert_eq(s.done, 0, "the snapshot must wait for the write in flight");
  cr_assert_eq(ploop_disk_aio_start(disk, q, false, a, 4096, 0, &tag), 0, "none starts while it waits");
  complete_pending();
  pthread_join(t, NULL);
  cr_assert_eq(s.rc, 0, "snapshot: %s", ploop_get_error());
  cr_assert_eq(ploop_aio_queue_reap(q, tags, res, 2), 1);
  cr_assert_eq(res[0], 0);
  /* The write is in the snapshot: the old top holds it, read through the stack. */
  OK(ploop_disk_pread(disk, a, 4096, 0));
  cr_assert_arr_eq(a, b, 4096);
  ploop_aio_queue_free(q);
  close_disk(disk);
  free(a);
  free(b);
}
