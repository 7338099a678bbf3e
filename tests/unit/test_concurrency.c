/* Many threads writing one disk while snapshots are taken: the final
 * contents equal a model, every snapshot is self-consistent, and the
 * closed disk checks clean. Exercises the allocation and snapshot locking. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libploop.h"

#define DISK_MB 16
#define THREADS 4
#define WRITES 300
#define CLUSTER (64u << 10)

static char dir[256];
static uint8_t *model;
static struct ploop_disk *disk;

struct worker {
  unsigned id;
  unsigned seed;
  int failed;
};

/* Each thread owns every THREADS-th 256 KiB stripe, so the final content is
 * deterministic while writes still share clusters' neighbours and the BAT. */
static void *writer(void *arg)
{
  struct worker *w = arg;
  uint8_t *buf;
  if (posix_memalign((void **)&buf, 4096, 256 << 10))
    return NULL;
  for (int i = 0; i < WRITES; i++) {
    uint64_t stripe = (uint64_t)(rand_r(&w->seed) % (DISK_MB * 4 / THREADS)) * THREADS + w->id;
    uint64_t off = stripe * (256 << 10) + (uint64_t)(rand_r(&w->seed) % 64) * 512;
    size_t len = 512 * (1 + rand_r(&w->seed) % 256);
    if (off + len > (stripe + 1) * (256 << 10))
      len = (stripe + 1) * (256 << 10) - off;
    memset(buf, (int)(1 + rand_r(&w->seed) % 255), len);
    if (ploop_disk_pwrite(disk, buf, len, off, i % 50 == 0 ? PLOOP_WRITE_FUA : 0) < 0) {
      w->failed = 1;
      break;
    }
    memcpy(model + off, buf, len);
    if (i % 40 == 0 && ploop_disk_flush(disk) < 0)
      w->failed = 1;
  }
  free(buf);
  return NULL;
}

Test(concurrency, writers_and_snapshots)
{
  snprintf(dir, sizeof dir, "/var/tmp/ploop-unit-conc.%d", getpid());
  char cmd[600], path[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
  cr_assert_eq(system(cmd), 0);
  snprintf(path, sizeof path, "%s/root.hds", dir);
  struct ploop_delta_create_params p = {.size_bytes = DISK_MB << 20, .cluster_sectors = CLUSTER / 512};
  cr_assert_eq(ploop_disk_create(path, &p), 0, "%s", ploop_get_error());
  model = calloc(1, DISK_MB << 20);
  disk = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDWR);
  cr_assert_not_null(disk, "%s", ploop_get_error());

  pthread_t t[THREADS];
  struct worker w[THREADS];
  for (unsigned i = 0; i < THREADS; i++) {
    w[i] = (struct worker){.id = i, .seed = 1234 + i};
    pthread_create(&t[i], NULL, writer, &w[i]);
  }
  char guids[8][PLOOP_UUID_LEN + 1];
  for (int s = 0; s < 8; s++) {
    usleep(2000);
    cr_assert_eq(ploop_disk_snapshot(disk, NULL, guids[s]), 0, "%s", ploop_get_error());
  }
  for (unsigned i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(w[i].failed, 0, "writer %u: %s", i, ploop_get_error());
  }
  cr_assert_eq(ploop_disk_depth(disk), 9u);
  uint8_t *got = NULL;
  cr_assert_eq(posix_memalign((void **)&got, 4096, DISK_MB << 20), 0);
  cr_assert_eq(ploop_disk_pread(disk, got, DISK_MB << 20, 0), 0, "%s", ploop_get_error());
  cr_assert(memcmp(got, model, DISK_MB << 20) == 0, "disk content differs from the model");
  cr_assert_eq(ploop_disk_close(disk), 0, "%s", ploop_get_error());

  char msg[4096];
  cr_assert_eq(ploop_disk_check(dir, 0, msg, sizeof msg), 0, "check: %s", msg);
  /* Every snapshot opens, and the newest merges back into a stack that reads the same. */
  for (int s = 0; s < 8; s++) {
    struct ploop_disk *v = ploop_disk_open(dir, guids[s], PLOOP_OPEN_RDONLY);
    cr_assert_not_null(v, "snapshot %s: %s", guids[s], ploop_get_error());
    ploop_disk_close(v);
  }
  cr_assert_eq(ploop_snapshot_merge(dir, NULL, true, NULL, NULL), 0, "%s", ploop_get_error());
  disk = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDONLY);
  cr_assert_not_null(disk, "%s", ploop_get_error());
  cr_assert_eq(ploop_disk_depth(disk), 1u);
  memset(got, 0, DISK_MB << 20);
  cr_assert_eq(ploop_disk_pread(disk, got, DISK_MB << 20, 0), 0, "%s", ploop_get_error());
  cr_assert(memcmp(got, model, DISK_MB << 20) == 0, "merged disk differs from the model");
  ploop_disk_close(disk);
  free(got);
  free(model);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}
