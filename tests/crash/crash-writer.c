/* Crash-test driver for libploop (run by tests/integration/crash-kill.sh).
 *
 *   crash-writer init DIR SIZE CLUSTER_BYTES
 *   crash-writer write DIR LOG SEED MODE     (MODE: plain|threads|snapshot|merge|resize|convert; runs until
 * killed) crash-writer verify DIR LOG BASELINE [--commit] crash-writer powerfail JOURNAL SEED       (see
 * powerfail.h)
 *
 * `write` appends one line to LOG before issuing each operation and, after
 * ploop_disk_flush (or a snapshot/close/merge that implies it) returns, a line
 * saying which operations are now durable, then fsyncs LOG.  `verify` replays
 * LOG over BASELINE (the disk's contents after the previous round) and checks
 * every byte of the disk: bytes of durable operations must read back exactly;
 * a byte touched by an operation not known durable may hold either the value
 * before it or the value it wrote.  With --commit the disk's contents become
 * the new BASELINE. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libploop.h"
#include "powerfail.h"

#define MAX_DISK (64ull << 20) /* writes stay below this: the model's size */
#define MAX_GROW (1ull << 30)  /* the resize mode grows up to this; beyond MAX_DISK reads zeros */
#define MAX_IO (256u << 10)

static void die(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("crash-writer: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

/* A library call failed: ENOSYS means "not implemented yet" and exits 77 so
 * the script can skip that mode; anything else is a failure. */
static void lib_die(const char *what)
{
  if (ploop_get_errno() == ENOSYS) {
    fprintf(stderr, "crash-writer: %s: %s\n", what, ploop_get_error());
    exit(77);
  }
  die("%s: %s", what, ploop_get_error());
}

/* splitmix64: small, seedable, good enough to spread offsets. */
static uint64_t rng_state;
static uint64_t rng(void)
{
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint64_t rng_below(uint64_t n)
{
  return n ? rng() % n : 0;
}

/* The byte a write with SEED puts at virtual offset OFF: depends on both, so
 * data read from a wrong offset or an older write never matches. */
static inline uint8_t data_byte(uint32_t seed, uint64_t off)
{
  uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 17 | seed);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (uint8_t)x;
}

/* ---- the log ---- */

enum op_kind { OP_WRITE = 'W', OP_ZERO = 'Z', OP_DISCARD = 'D' };

struct op {
  char kind;
  uint64_t off, len;
  uint32_t seed;
  bool durable;
  bool completed, in_flush; /* threads mode */
};

static int log_fd = -1;
static uint64_t n_issued;

static void log_line(bool sync, const char *fmt, ...)
{
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (write(log_fd, buf, n) != n)
    die("log write: %s", strerror(errno));
  if (sync && fsync(log_fd) < 0)
    die("log fsync: %s", strerror(errno));
}

/* All operations issued so far are durable. */
static void log_durable(void)
{
  log_line(true, "F %" PRIu64 "\n", n_issued);
}

/* ---- write mode ---- */

static uint8_t *iobuf;

static void do_random_op(struct ploop_disk *disk)
{
  uint64_t size = ploop_disk_size(disk);
  if (size > MAX_DISK)
    size = MAX_DISK;
  uint64_t cl = ploop_disk_cluster_size(disk);
  unsigned pick = rng_below(100);
  uint64_t len, off;
  if (rng_below(4) == 0) { /* unaligned */
    len = 1 + rng_below(MAX_IO);
    off = rng_below(size - len + 1);
  } else { /* sector-aligned, sometimes whole clusters */
    len = 512 * (1 + rng_below(MAX_IO / 512));
    if (rng_below(3) == 0)
      len = cl * (1 + rng_below(3));
    if (len > MAX_IO)
      len = MAX_IO;
    if (len > size)
      len = size;
    off = 512 * rng_below((size - len) / 512 + 1);
  }
  uint32_t seed = (uint32_t)rng() | 1;
  char kind = pick < 75 ? OP_WRITE : pick < 88 ? OP_DISCARD : OP_ZERO;
  bool fua = kind == OP_WRITE && rng_below(10) == 0;
  uint64_t idx = ++n_issued;
  log_line(false, "O %c %" PRIu64 " %" PRIu64 " %u\n", kind, off, len, seed);
  int rc;
  if (kind == OP_WRITE) {
    for (uint64_t i = 0; i < len; i++)
      iobuf[i] = data_byte(seed, off + i);
    rc = ploop_disk_pwrite(disk, iobuf, len, off, fua ? PLOOP_WRITE_FUA : 0);
  } else if (kind == OP_DISCARD) {
    rc = ploop_disk_discard(disk, off, len);
  } else {
    rc = ploop_disk_write_zeroes(disk, off, len, rng_below(2) ? PLOOP_ZERO_NO_HOLE : 0);
  }
  if (rc < 0)
    lib_die(kind == OP_WRITE ? "pwrite" : kind == OP_DISCARD ? "discard" : "write_zeroes");
  if (fua)
    log_line(true, "U %" PRIu64 "\n", idx);
}

/* A burst of random operations with a flush every few of them. */
static void burst(struct ploop_disk *disk, unsigned n)
{
  unsigned until_flush = 1 + rng_below(8);
  for (unsigned i = 0; i < n; i++) {
    do_random_op(disk);
    if (--until_flush == 0) {
      if (ploop_disk_flush(disk) < 0)
        lib_die("flush");
      log_durable();
      until_flush = 1 + rng_below(8);
    }
  }
}

static struct ploop_disk *open_rw(const char *dir)
{
  struct ploop_disk *d = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDWR);
  if (!d)
    lib_die("open");
  return d;
}

static void close_disk(struct ploop_disk *d)
{
  if (ploop_disk_close(d) < 0)
    lib_die("close");
  log_durable();
}

/* ---- threads mode: concurrent writers and a flusher ---- */

/* Four writers own interleaved 48 KiB stripes (not cluster-aligned, so two
 * writers share clusters and race on allocation and copy-up); one thread
 * flushes every few milliseconds.  Log: "Q idx ..." before an op, "C idx"
 * after it returns, "B" before a flush and "E" after it: the ops completed
 * before a "B" are durable at the following "E". */
#define NTHREADS 4
#define STRIPE (48u << 10)

static uint64_t next_idx; /* atomic */

struct twriter {
  struct ploop_disk *disk;
  unsigned id;
  uint64_t rng;
  uint8_t *buf;
};

static uint64_t rng_r(uint64_t *st)
{
  uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void *twriter_run(void *arg)
{
  struct twriter *w = arg;
  uint64_t size = ploop_disk_size(w->disk);
  if (size > MAX_DISK)
    size = MAX_DISK;
  uint64_t stripes = size / STRIPE;
  for (;;) {
    uint64_t s = (rng_r(&w->rng) % (stripes / NTHREADS)) * NTHREADS + w->id;
    uint64_t base = s * STRIPE, off, len;
    if (rng_r(&w->rng) % 4 == 0) {
      len = 1 + rng_r(&w->rng) % STRIPE;
      off = base + rng_r(&w->rng) % (STRIPE - len + 1);
    } else {
      len = 512 * (1 + rng_r(&w->rng) % (STRIPE / 512));
      off = base + 512 * (rng_r(&w->rng) % ((STRIPE - len) / 512 + 1));
    }
    unsigned pick = (unsigned)(rng_r(&w->rng) % 100);
    char kind = pick < 80 ? OP_WRITE : pick < 90 ? OP_DISCARD : OP_ZERO;
    bool fua = kind == OP_WRITE && rng_r(&w->rng) % 10 == 0;
    uint32_t seed = (uint32_t)rng_r(&w->rng) | 1;
    uint64_t idx = __atomic_add_fetch(&next_idx, 1, __ATOMIC_SEQ_CST);
    log_line(false, "Q %" PRIu64 " %c %" PRIu64 " %" PRIu64 " %u\n", idx, kind, off, len, seed);
    int rc;
    if (kind == OP_WRITE) {
      for (uint64_t i = 0; i < len; i++)
        w->buf[i] = data_byte(seed, off + i);
      rc = ploop_disk_pwrite(w->disk, w->buf, len, off, fua ? PLOOP_WRITE_FUA : 0);
    } else if (kind == OP_DISCARD) {
      rc = ploop_disk_discard(w->disk, off, len);
    } else {
      rc = ploop_disk_write_zeroes(w->disk, off, len, 0);
    }
    if (rc < 0)
      lib_die("threaded I/O");
    log_line(fua, fua ? "U %" PRIu64 "\n" : "C %" PRIu64 "\n", idx);
  }
  return NULL;
}

static void run_threads(struct ploop_disk *disk, uint64_t seed)
{
  struct twriter w[NTHREADS];
  pthread_t t[NTHREADS];
  for (unsigned i = 0; i < NTHREADS; i++) {
    w[i] = (struct twriter){disk, i, seed * 31 + i, NULL};
    if (posix_memalign((void **)&w[i].buf, 4096, STRIPE) != 0)
      die("out of memory");
    if (pthread_create(&t[i], NULL, twriter_run, &w[i]) != 0)
      die("pthread_create failed");
  }
  for (;;) {
    usleep(1000 * (1 + rng_below(20)));
    log_line(false, "B\n");
    if (ploop_disk_flush(disk) < 0)
      lib_die("flush");
    log_line(true, "E\n");
  }
}

static int cmd_write(const char *dir, const char *logpath, uint64_t seed, const char *mode)
{
  rng_state = seed;
  alarm(120); /* the scripts kill it within a second; never outlive a lost script */
  log_fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
  if (log_fd < 0)
    die("%s: %s", logpath, strerror(errno));
  if (posix_memalign((void **)&iobuf, 4096, MAX_IO) != 0)
    die("out of memory");
  struct ploop_disk *disk = open_rw(dir);
  log_line(true, "S %s\n", mode);
  if (!strcmp(mode, "threads"))
    run_threads(disk, seed);
  for (unsigned round = 0;; round++) {
    if (!strcmp(mode, "plain")) {
      burst(disk, 50);
    } else if (!strcmp(mode, "snapshot")) {
      burst(disk, 20);
      char guid[PLOOP_UUID_LEN + 1];
      log_line(true, "P snapshot\n");
      /* Past 40 deltas the stack stops growing: flush instead, since the
       * line below claims every issued op durable (a snapshot drains and
       * flushes; skipping both once made this test fail at random). */
      if (ploop_disk_depth(disk) < 40 ? ploop_disk_snapshot(disk, NULL, guid) < 0 : ploop_disk_flush(disk) < 0)
        lib_die("snapshot");
      log_durable();
    } else if (!strcmp(mode, "merge")) {
      for (int k = 0; k < 2; k++) {
        burst(disk, 20);
        char guid[PLOOP_UUID_LEN + 1];
        if (ploop_disk_snapshot(disk, NULL, guid) < 0)
          lib_die("snapshot");
        log_durable();
      }
      burst(disk, 10);
      if (round % 2) { /* online merge of everything below the top */
        log_line(true, "M online\n");
        if (ploop_disk_merge(disk, NULL, true, NULL, NULL) < 0)
          lib_die("online merge");
        log_durable();
      } else { /* offline merge of the whole stack */
        close_disk(disk);
        log_line(true, "M offline\n");
        if (ploop_snapshot_merge(dir, NULL, true, NULL, NULL) < 0)
          lib_die("offline merge");
        disk = open_rw(dir);
      }
      log_line(true, "m done\n");
    } else if (!strcmp(mode, "resize")) {
      burst(disk, 20);
      /* Small steps, and big ones that need more BAT clusters, which moves
       * the data clusters right behind the BAT (the relocation path). */
      uint64_t size = ploop_disk_size(disk);
      uint64_t to =
          size + (rng_below(2) ? ploop_disk_cluster_size(disk) * (1 + rng_below(40)) : 128ull << 20);
      if (to <= MAX_GROW) {
        log_line(true, "R %" PRIu64 "\n", to);
        if (round % 2) {
          if (ploop_disk_resize(disk, to, 0) < 0)
            lib_die("online resize");
          log_durable();
        } else {
          close_disk(disk);
          if (ploop_resize(dir, to, 0) < 0)
            lib_die("offline resize");
          disk = open_rw(dir);
        }
        log_line(true, "r %" PRIu64 "\n", to);
      }
    } else if (!strcmp(mode, "convert")) {
      /* v2 -> v1 -> v2 in place: the BAT is rewritten under a backup. */
      burst(disk, 20);
      close_disk(disk);
      int version = round % 2 ? 2 : 1;
      log_line(true, "C %d\n", version);
      if (ploop_convert_version(dir, version) < 0)
        lib_die("convert");
      log_line(true, "c %d\n", version);
      disk = open_rw(dir);
    } else {
      die("unknown mode '%s'", mode);
    }
  }
  return 0; /* not reached: the writer runs until it is killed */
}

/* ---- verify mode ---- */

static uint8_t op_byte(const struct op *o, uint64_t pos)
{
  return o->kind == OP_WRITE ? data_byte(o->seed, pos) : 0;
}

static struct op *read_log(const char *path, size_t *n_out, uint64_t *min_size, uint64_t *max_size)
{
  FILE *f = fopen(path, "r");
  if (!f)
    die("%s: %s", path, strerror(errno));
  size_t n = 0, cap = 1024;
  struct op *ops = calloc(cap, sizeof *ops);
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (!strchr(line, '\n'))
      break; /* torn last line: the op was never issued */
    struct op o = {0};
    uint64_t v;
    if (sscanf(line, "O %c %" SCNu64 " %" SCNu64 " %" SCNu32, &o.kind, &o.off, &o.len, &o.seed) == 4) {
      if (n == cap)
        ops = realloc(ops, (cap *= 2) * sizeof *ops);
      ops[n++] = o;
    } else if (sscanf(line, "Q %" SCNu64 " %c %" SCNu64 " %" SCNu64 " %" SCNu32, &v, &o.kind, &o.off, &o.len,
                      &o.seed) == 5 &&
               v >= 1) {
      /* Threads mode: explicit indexes, lines may come out of order. */
      while (cap < v)
        ops = realloc(ops, (cap *= 2) * sizeof *ops);
      if (v > n) {
        memset(ops + n, 0, (v - n) * sizeof *ops);
        n = v;
      }
      ops[v - 1] = o;
    } else if (sscanf(line, "C %" SCNu64, &v) == 1) {
      if (v >= 1 && v <= n)
        ops[v - 1].completed = true;
    } else if (line[0] == 'B' && line[1] == '\n') {
      for (size_t i = 0; i < n; i++)
        ops[i].in_flush = ops[i].completed;
    } else if (line[0] == 'E' && line[1] == '\n') {
      for (size_t i = 0; i < n; i++)
        if (ops[i].in_flush)
          ops[i].durable = true;
    } else if (sscanf(line, "F %" SCNu64, &v) == 1) {
      for (uint64_t i = 0; i < v && i < n; i++)
        ops[i].durable = true;
    } else if (sscanf(line, "U %" SCNu64, &v) == 1) {
      if (v >= 1 && v <= n)
        ops[v - 1].durable = true;
    } else if (sscanf(line, "R %" SCNu64, &v) == 1) {
      if (v > *max_size)
        *max_size = v;
    } else if (sscanf(line, "r %" SCNu64, &v) == 1) {
      if (v > *min_size)
        *min_size = v;
    }
  }
  fclose(f);
  *n_out = n;
  return ops;
}

static int cmd_verify(const char *dir, const char *logpath, const char *baseline, bool commit)
{
  struct ploop_disk *disk = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDONLY | PLOOP_OPEN_ALLOW_DIRTY);
  if (!disk)
    die("open after crash: %s", ploop_get_error());
  uint64_t size = ploop_disk_size(disk);

  /* The model: BASELINE (zeros if absent), then every durable op in order. */
  uint8_t *model = calloc(1, MAX_DISK), *actual = malloc(MAX_DISK);
  uint32_t *last = calloc(MAX_DISK, sizeof *last); /* last durable op (1-based) per byte */
  if (!model || !actual || !last)
    die("out of memory");
  /* The script makes the first BASELINE: a zero file of the initial size. */
  int bfd = open(baseline, O_RDONLY);
  if (bfd < 0)
    die("%s: %s", baseline, strerror(errno));
  struct stat st;
  if (read(bfd, model, MAX_DISK) < 0 || fstat(bfd, &st) < 0)
    die("%s: %s", baseline, strerror(errno));
  uint64_t base_size = (uint64_t)st.st_size; /* the disk size after the last round */
  close(bfd);
  uint64_t min_size = base_size, max_size = base_size;
  size_t n;
  struct op *ops = read_log(logpath, &n, &min_size, &max_size);
  if (size < min_size || size > max_size)
    die("disk size %" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "] (baseline/resizes)", size, min_size,
        max_size);
  for (size_t i = 0; i < n; i++) {
    const struct op *o = &ops[i];
    if (o->off + o->len > MAX_DISK)
      die("log op %zu out of range", i + 1);
    if (!o->durable)
      continue;
    for (uint64_t p = o->off; p < o->off + o->len; p++) {
      model[p] = op_byte(o, p);
      last[p] = (uint32_t)(i + 1);
    }
  }

  uint64_t modeled = size < MAX_DISK ? size : MAX_DISK;
  if (ploop_disk_pread(disk, actual, modeled, 0) < 0)
    die("read after crash: %s", ploop_get_error());
  /* Nothing is ever written past MAX_DISK: that part of a grown disk is zeros. */
  static uint8_t chunk[MAX_IO], zeros[MAX_IO];
  for (uint64_t p = modeled; p < size; p += MAX_IO) {
    uint64_t len = size - p < MAX_IO ? size - p : MAX_IO;
    if (ploop_disk_pread(disk, chunk, len, p) < 0)
      die("read after crash: %s", ploop_get_error());
    if (memcmp(chunk, zeros, len))
      die("bytes past %" PRIu64 " (never written) are not zero near %" PRIu64, modeled, p);
  }
  uint64_t bad = 0, maybe_bytes = 0;
  size_t durable = 0;
  for (size_t i = 0; i < n; i++)
    durable += ops[i].durable;
  for (uint64_t p = 0; p < modeled; p++) {
    if (actual[p] == model[p])
      continue;
    /* Not the durable value: legal only if some later non-durable op covering
     * P wrote exactly this byte. */
    bool ok = false;
    for (size_t i = n; i-- > last[p];) {
      const struct op *o = &ops[i];
      if (!o->durable && p >= o->off && p < o->off + o->len && op_byte(o, p) == actual[p]) {
        ok = true;
        break;
      }
    }
    if (ok) {
      maybe_bytes++;
      continue;
    }
    if (bad++ < 5)
      fprintf(stderr, "crash-writer: byte %" PRIu64 " is 0x%02x, expected 0x%02x (last durable op %u)\n", p,
              actual[p], model[p], last[p]);
  }
  if (ploop_disk_close(disk) < 0)
    die("close: %s", ploop_get_error());
  printf("verify: %zu ops logged, %zu durable, size %" PRIu64 ", %" PRIu64
         " bytes from unflushed ops, %" PRIu64 " bad bytes\n",
         n, durable, size, maybe_bytes, bad);
  if (bad)
    return 1;
  if (commit) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", baseline);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    /* No fsync: the baseline only has to outlive the writer being killed. */
    if (fd < 0 || write(fd, actual, modeled) != (ssize_t)modeled || ftruncate(fd, size) < 0 ||
        close(fd) < 0 || rename(tmp, baseline) < 0)
      die("%s: %s", baseline, strerror(errno));
  }
  free(model);
  free(actual);
  free(last);
  free(ops);
  return 0;
}

static int cmd_init(const char *dir, const char *size_str, const char *cluster_str)
{
  uint64_t size, cluster;
  if (ploop_parse_size(size_str, &size) < 0 || ploop_parse_size(cluster_str, &cluster) < 0)
    die("%s", ploop_get_error());
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, PLOOP_DEFAULT_IMAGE_NAME);
  struct ploop_delta_create_params p = {size, (uint32_t)(cluster / 512), 2};
  if (ploop_disk_create(path, &p) < 0)
    die("create: %s", ploop_get_error());
  return 0;
}

int main(int argc, char **argv)
{
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 5 && !strcmp(argv[1], "init"))
    return cmd_init(argv[2], argv[3], argv[4]);
  if (argc == 6 && !strcmp(argv[1], "write"))
    return cmd_write(argv[2], argv[3], strtoull(argv[4], NULL, 0), argv[5]);
  if (argc == 4 && !strcmp(argv[1], "powerfail"))
    return powerfail_replay(argv[2], strtoull(argv[3], NULL, 0));
  if ((argc == 5 || argc == 6) && !strcmp(argv[1], "verify"))
    return cmd_verify(argv[2], argv[3], argv[4], argc == 6 && !strcmp(argv[5], "--commit"));
  fprintf(stderr, "usage: crash-writer init DIR SIZE CLUSTER_BYTES\n"
                  "       crash-writer write DIR LOG SEED plain|threads|snapshot|merge|resize|convert\n"
                  "       crash-writer verify DIR LOG BASELINE [--commit]\n"
                  "       crash-writer powerfail JOURNAL SEED\n");
  return 2;
}
