/* Helpers shared by the stack-level unit tests (test_snapshot.c, test_resize.c,
 * test_merge.c):
 * data through the library, a byte model to compare with, views of snapshots,
 * and writer threads that stamp whole clusters with a version. The including
 * file defines CL (cluster bytes) and DISK_SIZE first. */
#ifndef PLOOP_TEST_STACK_H
#define PLOOP_TEST_STACK_H

#include <pthread.h>

#include "helpers.h"

static inline void put(struct ploop_disk *disk, uint32_t seed, uint64_t off, size_t len)
{
  uint8_t *b = malloc(len);
  fill_pattern(b, len, seed, off);
  OK(ploop_disk_pwrite(disk, b, len, off, 0));
  free(b);
}

/* A new disk of DISK_SIZE in CL clusters, open read-write. */
static inline struct ploop_disk *new_disk(void)
{
  make_disk(DISK_SIZE, CL / 512);
  return NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
}

/* The whole virtual disk as the library reads it. */
static inline uint8_t *read_all(struct ploop_disk *disk)
{
  uint64_t n = ploop_disk_size(disk);
  uint8_t *b = malloc(n);
  OK(ploop_disk_pread(disk, b, n, 0));
  return b;
}

static inline uint8_t *read_view(const char *guid, uint64_t *size)
{
  struct ploop_disk *d = NOTNULL(ploop_disk_open(test_dir, guid, PLOOP_OPEN_RDONLY));
  uint8_t *b = read_all(d);
  if (size)
    *size = ploop_disk_size(d);
  OK(ploop_disk_close(d));
  return b;
}

/* Model of the expected disk contents, updated alongside every write. */
static inline void model_put(uint8_t *m, uint32_t seed, uint64_t off, size_t len)
{
  fill_pattern(m + off, len, seed, off);
}

/* put, and the same bytes into MODEL. */
static inline void put_both(struct ploop_disk *disk, uint8_t *model, uint32_t seed, uint64_t off, size_t len)
{
  put(disk, seed, off, len);
  model_put(model, seed, off, len);
}

static inline void assert_equal_model(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(got[i], want[i], "%s: byte %zu is 0x%02x, want 0x%02x", what, i, got[i], want[i]);
}

static inline void assert_disk_is(const uint8_t *model, const char *what)
{
  uint64_t n;
  uint8_t *b = read_view(NULL, &n);
  cr_assert_eq(n, DISK_SIZE);
  assert_equal_model(b, model, DISK_SIZE, what);
  free(b);
}

static inline size_t n_images(void)
{
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  size_t n = d->n_images;
  OK(ploop_descriptor_validate(d));
  ploop_descriptor_free(d);
  return n;
}

static inline char *image_path(const char *guid)
{
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  const struct ploop_image_desc *im = ploop_descriptor_find_image(d, guid);
  char *p = im ? ploop_descriptor_image_path(d, im) : NULL;
  ploop_descriptor_free(d);
  return p;
}

/* Every delta file of the disk checks clean. */
static inline void assert_all_deltas_clean(void)
{
  struct ploop_descriptor *d = NOTNULL(ploop_descriptor_load(test_dir));
  for (size_t i = 0; i < d->n_images; i++) {
    char *p = ploop_descriptor_image_path(d, &d->images[i]);
    struct ploop_check_report r;
    int rc = ploop_delta_check(p, PLOOP_CHECK_FORCE | PLOOP_CHECK_READONLY, &r);
    char buf[1024] = "";
    ploop_check_report_format(&r, buf, sizeof buf);
    cr_assert_eq(rc, 0, "%s not clean: %s %s", p, buf, rc < 0 ? ploop_get_error() : "");
    free(p);
  }
  ploop_descriptor_free(d);
}

/* Base with A in clusters 0-3, snapshot S1, then B over clusters 2-5. */
static inline void base_snapshot_write(uint8_t *model, char *s1)
{
  struct ploop_disk *disk = new_disk();
  put_both(disk, model, 1, 0, 4 * CL);
  OK(ploop_disk_snapshot(disk, NULL, s1));
  put_both(disk, model, 2, 2 * CL + 100, 4 * CL - 200);
  OK(ploop_disk_close(disk));
}

/* ---- snapshots under concurrent writers ---- */

#define NWRITERS 4
#define NCLUSTERS 32

struct cwriter {
  struct ploop_disk *disk;
  int id;
  volatile int *stop;
  int failed;
  uint64_t *done; /* last version written per cluster (each cluster has one writer) */
};

/* Cluster C at version V: the version in the first 8 bytes, then a pattern
 * of (V, C), so a torn or stale cluster never passes as a complete one. */
static inline void version_fill(uint8_t *b, uint64_t v, uint32_t c)
{
  memcpy(b, &v, 8);
  fill_pattern(b + 8, CL - 8, (uint32_t)(v * 131 + c), (uint64_t)c * CL + 8);
}

static inline void *cwriter_run(void *arg)
{
  struct cwriter *w = arg;
  uint8_t *b = malloc(CL);
  for (uint64_t v = 1; !*w->stop; v++)
    for (uint32_t c = w->id; c < NCLUSTERS; c += NWRITERS) {
      version_fill(b, v, c);
      if (ploop_disk_pwrite(w->disk, b, CL, (uint64_t)c * CL, 0) < 0) {
        w->failed = 1;
        free(b);
        return NULL;
      }
      w->done[c] = v;
    }
  free(b);
  return NULL;
}

/* NWRITERS cwriters on DISK, started and stopped together. */
struct writers {
  pthread_t t[NWRITERS];
  struct cwriter w[NWRITERS];
  volatile int stop;
};

static inline void writers_start(struct writers *ws, struct ploop_disk *disk, uint64_t *done)
{
  ws->stop = 0;
  for (int i = 0; i < NWRITERS; i++) {
    ws->w[i] = (struct cwriter){disk, i, &ws->stop, 0, done};
    cr_assert_eq(pthread_create(&ws->t[i], NULL, cwriter_run, &ws->w[i]), 0);
  }
}

static inline void writers_stop(struct writers *ws)
{
  ws->stop = 1;
  for (int i = 0; i < NWRITERS; i++) {
    pthread_join(ws->t[i], NULL);
    cr_assert_eq(ws->w[i].failed, 0, "writer %d failed: %s", i, ploop_get_error());
  }
}

/* Version of each cluster in a view (0 = never written); fails on a torn one. */
static inline void view_versions(const char *guid, uint64_t *ver)
{
  struct ploop_disk *d = NOTNULL(ploop_disk_open(test_dir, guid, PLOOP_OPEN_RDONLY));
  uint8_t *b = malloc(CL), *want = malloc(CL);
  for (uint32_t c = 0; c < NCLUSTERS; c++) {
    OK(ploop_disk_pread(d, b, CL, (uint64_t)c * CL));
    memcpy(&ver[c], b, 8);
    if (ver[c] == 0) {
      cr_assert_eq(first_nonzero(b, CL), -1, "%s cluster %u: partly written", guid ? guid : "top", c);
      continue;
    }
    version_fill(want, ver[c], c);
    cr_assert(memcmp(b, want, CL) == 0, "%s cluster %u: not one complete write (version %llu)",
              guid ? guid : "top", c, (unsigned long long)ver[c]);
  }
  free(b);
  free(want);
  OK(ploop_disk_close(d));
}

#endif
