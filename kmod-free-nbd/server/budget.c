/* Payload memory of READ/WRITE requests, bounded per connection and for the
 * whole server.  A reader that cannot get a buffer waits while holding its
 * connection's read lock, so a client that does not drain its replies stops
 * being read (backpressure) and costs no more than its bound. */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "conn.h"

/* Buffers come in power-of-two sizes from 64 KiB to NBD_MAX_PAYLOAD, so a
 * freed one fits the next request of its class and the cache needs no
 * search; a request is charged at most twice its size. */
#define CLASS_MIN_SHIFT 16
#define NCLASSES 10
_Static_assert((1u << (CLASS_MIN_SHIFT + NCLASSES - 1)) == NBD_MAX_PAYLOAD,
               "the largest class holds the largest payload");

struct payload_buf {
  struct payload_buf *next;
  uint8_t *p;
  unsigned cls;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t freed = PTHREAD_COND_INITIALIZER;
static unsigned waiters;
static uint64_t charged; /* bytes of every buffer that exists: in use + cached */
static uint64_t cached;
static struct payload_buf *cache[NCLASSES];
static uint64_t per_conn_limit = BUDGET_DEFAULT_PER_CONN;
static uint64_t total_limit = BUDGET_DEFAULT_TOTAL;

static size_t class_bytes(unsigned cls) { return (size_t)1 << (CLASS_MIN_SHIFT + cls); }

static unsigned class_of(size_t len) {
  unsigned cls = 0;
  while (cls < NCLASSES - 1 && class_bytes(cls) < len) cls++;
  return cls;
}

void budget_configure(uint64_t per_conn, uint64_t total) {
  per_conn_limit = per_conn;
  total_limit = total;
}

/* Kept for reuse up to one connection's bound: enough for a steady
 * workload to allocate nothing per request, returned to the system as soon
 * as a request needs the room. */
static uint64_t cache_limit(void) {
  return per_conn_limit < total_limit ? per_conn_limit : total_limit;
}

static void buf_free(struct payload_buf *b) {
  munmap(b->p, class_bytes(b->cls));
  free(b);
}

/* Takes cached buffers off until NEED more bytes fit under the total (or
 * the cache is empty) onto *OUT; the caller unmaps them out of the lock. */
static void evict_for(uint64_t need, struct payload_buf **out) {
  for (int cls = NCLASSES - 1; cls >= 0 && charged + need > total_limit; cls--) {
    while (cache[cls] && charged + need > total_limit) {
      struct payload_buf *b = cache[cls];
      cache[cls] = b->next;
      cached -= class_bytes((unsigned)cls);
      charged -= class_bytes((unsigned)cls);
      b->next = *out;
      *out = b;
    }
  }
}

static void free_list(struct payload_buf *b) {
  while (b) {
    struct payload_buf *next = b->next;
    buf_free(b);
    b = next;
  }
}

struct payload_buf *budget_acquire(struct conn *c, size_t len) {
  const unsigned cls = class_of(len);
  const uint64_t bytes = class_bytes(cls);
  struct payload_buf *b = NULL, *evicted = NULL;
  bool fresh = false;
  pthread_mutex_lock(&lock);
  for (;;) {
    if (atomic_load(&c->closing)) break;
    /* A connection with nothing in flight may always go on, even past its
     * own bound (a 32 MiB request under --max-inflight-bytes 1M). */
    if (c->mem_in_use == 0 || c->mem_in_use + bytes <= per_conn_limit) {
      if (cache[cls]) {
        b = cache[cls];
        cache[cls] = b->next;
        cached -= bytes;
        break;
      }
      evict_for(bytes, &evicted);
      if (charged + bytes <= total_limit) {
        charged += bytes;
        fresh = true;
        break;
      }
    }
    /* Timed: a closing connection must notice without a wake-up. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    waiters++;
    pthread_cond_timedwait(&freed, &lock, &ts);
    waiters--;
  }
  if (b || fresh) {
    c->mem_in_use += bytes;
  }
  pthread_mutex_unlock(&lock);
  free_list(evicted);
  if (!fresh) return b;

  b = malloc(sizeof *b);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!b || p == MAP_FAILED) {
    free(b);
    if (p != MAP_FAILED) munmap(p, bytes);
    pthread_mutex_lock(&lock);
    charged -= bytes;
    c->mem_in_use -= bytes;
    if (waiters) pthread_cond_broadcast(&freed);
    pthread_mutex_unlock(&lock);
    errno = ENOMEM;
    return NULL;
  }
  b->p = p;
  b->cls = cls;
  b->next = NULL;
  return b;
}

uint8_t *budget_data(struct payload_buf *b) { return b->p; }

void budget_release(struct conn *c, struct payload_buf *b) {
  if (!b) return;
  const uint64_t bytes = class_bytes(b->cls);
  bool drop;
  pthread_mutex_lock(&lock);
  c->mem_in_use -= bytes;
  drop = cached + bytes > cache_limit();
  if (drop) {
    charged -= bytes;
  } else {
    b->next = cache[b->cls];
    cache[b->cls] = b;
    cached += bytes;
  }
  if (waiters) pthread_cond_broadcast(&freed);
  pthread_mutex_unlock(&lock);
  if (drop) buf_free(b);
}

void budget_cleanup(void) {
  pthread_mutex_lock(&lock);
  struct payload_buf *all = NULL;
  for (unsigned cls = 0; cls < NCLASSES; cls++) {
    while (cache[cls]) {
      struct payload_buf *b = cache[cls];
      cache[cls] = b->next;
      cached -= class_bytes(cls);
      charged -= class_bytes(cls);
      b->next = all;
      all = b;
    }
  }
  pthread_mutex_unlock(&lock);
  free_list(all);
}
