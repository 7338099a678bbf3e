/* Unit tests of kmod-free-nbd/server/budget.c, the payload memory bounds of
 * ploop-nbd: the per-connection bound makes a reader wait, a connection
 * with nothing in flight always gets one buffer, the total is strict and
 * gives way to cached buffers, and a closing connection stops waiting. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* budget.c has no dependency beyond struct conn: compiled in here. */
#include "../../kmod-free-nbd/server/budget.c"

#define MIB (1ull << 20)

struct waiter {
  struct conn *c;
  size_t len;
  struct payload_buf *got;
  atomic_bool done;
};

static void *wait_thread(void *arg) {
  struct waiter *w = arg;
  w->got = budget_acquire(w->c, w->len);
  atomic_store(&w->done, true);
  return NULL;
}

static bool done_within(struct waiter *w, int ms) {
  for (int i = 0; i < ms / 10; i++) {
    if (atomic_load(&w->done)) return true;
    usleep(10000);
  }
  return atomic_load(&w->done);
}

static void reset(uint64_t per_conn, uint64_t total) {
  budget_cleanup();
  budget_configure(per_conn, total);
}

Test(nbd_budget, buffer_is_aligned_and_writable) {
  reset(64 * MIB, 512 * MIB);
  struct conn c = {0};
  struct payload_buf *b = budget_acquire(&c, 4096);
  cr_assert_not_null(b);
  cr_assert_eq((uintptr_t)budget_data(b) % 4096, 0);
  memset(budget_data(b), 0xab, 64 << 10); /* the smallest class is 64 KiB */
  cr_assert_eq(c.mem_in_use, 64 << 10);
  budget_release(&c, b);
  cr_assert_eq(c.mem_in_use, 0);
  struct payload_buf *again = budget_acquire(&c, 1000);
  cr_assert_eq(again, b, "a released buffer is reused from the cache");
  budget_release(&c, again);
  budget_cleanup();
}

Test(nbd_budget, connection_waits_past_its_bound_until_a_reply_drains) {
  reset(64 * MIB, 512 * MIB);
  struct conn c = {0};
  struct payload_buf *a = budget_acquire(&c, 32 * MIB);
  struct payload_buf *b = budget_acquire(&c, 20 * MIB); /* charged as 32 MiB */
  cr_assert(a && b);
  cr_assert_eq(c.mem_in_use, 64 * MIB);
  struct waiter w = {.c = &c, .len = 4096};
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  cr_assert_not(done_within(&w, 300), "a third request must wait at the 64 MiB bound");
  /* Another connection is not held up by this one's bound. */
  struct conn other = {0};
  struct payload_buf *o = budget_acquire(&other, 32 * MIB);
  cr_assert_not_null(o);
  budget_release(&c, a);
  cr_assert(done_within(&w, 2000), "released room lets the waiting request go");
  pthread_join(t, NULL);
  cr_assert_not_null(w.got);
  budget_release(&c, w.got);
  budget_release(&c, b);
  budget_release(&other, o);
  cr_assert_eq(c.mem_in_use, 0);
  budget_cleanup();
}

Test(nbd_budget, one_request_larger_than_the_bound_goes_through) {
  reset(1 * MIB, 512 * MIB);
  struct conn c = {0};
  struct payload_buf *b = budget_acquire(&c, 32 * MIB);
  cr_assert_not_null(b, "nothing in flight: a 32 MiB request passes a 1 MiB bound");
  struct waiter w = {.c = &c, .len = 4096};
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  cr_assert_not(done_within(&w, 300), "but not a second one beside it");
  budget_release(&c, b);
  cr_assert(done_within(&w, 2000));
  pthread_join(t, NULL);
  budget_release(&c, w.got);
  budget_cleanup();
}

Test(nbd_budget, total_is_strict_and_a_closing_connection_stops_waiting) {
  reset(64 * MIB, 64 * MIB);
  struct conn a = {0}, b = {0}, c = {0};
  struct payload_buf *pa = budget_acquire(&a, 32 * MIB);
  struct payload_buf *pb = budget_acquire(&b, 32 * MIB);
  cr_assert(pa && pb);
  struct waiter w = {.c = &c, .len = 64 << 10};
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  cr_assert_not(done_within(&w, 300), "the total holds even for a connection with nothing in flight");
  atomic_store(&c.closing, true);
  cr_assert(done_within(&w, 1000), "closing ends the wait");
  pthread_join(t, NULL);
  cr_assert_null(w.got);
  cr_assert_eq(c.mem_in_use, 0);
  budget_release(&a, pa);
  budget_release(&b, pb);
  budget_cleanup();
}

Test(nbd_budget, cached_buffers_give_way_to_a_request) {
  reset(64 * MIB, 64 * MIB);
  struct conn a = {0};
  /* Two 32 MiB buffers cached fill the whole total... */
  struct payload_buf *x = budget_acquire(&a, 32 * MIB), *y = budget_acquire(&a, 32 * MIB);
  budget_release(&a, x);
  budget_release(&a, y);
  cr_assert_eq(charged, 64 * MIB);
  /* ...yet a request of another size is served at once by freeing them. */
  struct payload_buf *z = budget_acquire(&a, 1 * MIB);
  cr_assert_not_null(z);
  cr_assert_leq(charged, 64 * MIB);
  budget_release(&a, z);
  budget_cleanup();
  cr_assert_eq(charged, 0);
}
