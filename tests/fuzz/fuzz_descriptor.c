/* libFuzzer harness: DiskDescriptor.xml. The input is written as
 * DIR/DiskDescriptor.xml beside a small valid root.hds and loaded the way
 * every verb loads it; what loads is validated, walked (chains, image
 * paths), saved back and opened as a disk read-only. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz-common.h"
#include "libploop.h"

/* A valid 1 MiB image with 32 KiB clusters, made once: every run copies
 * it, so the descriptor's references to root.hds can succeed. */
static uint8_t *g_image;
static size_t g_image_len;

static void make_image(void) {
  char dir[PATH_MAX], path[PATH_MAX];
  fuzz_tmpdir(dir);
  snprintf(path, sizeof path, "%s/img", dir);
  struct ploop_delta_create_params p = {.size_bytes = 1 << 20, .cluster_sectors = 64, .version = 2};
  if (ploop_delta_create(path, &p) < 0) {
    fprintf(stderr, "fuzz: %s\n", ploop_get_error());
    abort();
  }
  FILE *f = fopen(path, "rb");
  if (!f) abort();
  g_image = malloc(1 << 20);
  g_image_len = fread(g_image, 1, 1 << 20, f);
  fclose(f);
  fuzz_rmtree(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_image) make_image();
  int fds = fuzz_count_fds();
  char dir[PATH_MAX], path[PATH_MAX];
  fuzz_tmpdir(dir);
  snprintf(path, sizeof path, "%s/%s", dir, PLOOP_DEFAULT_IMAGE_NAME);
  fuzz_write_file(path, g_image, g_image_len);
  snprintf(path, sizeof path, "%s/%s", dir, PLOOP_DESCRIPTOR_NAME);
  fuzz_write_file(path, data, size);

  struct ploop_descriptor *d = ploop_descriptor_load(dir);
  if (d) {
    bool valid = ploop_descriptor_validate(d) == 0;
    size_t idx[PLOOP_MAX_DELTAS];
    ploop_descriptor_chain(d, NULL, idx, PLOOP_MAX_DELTAS);
    for (size_t i = 0; i < d->n_snapshots; i++) ploop_descriptor_chain(d, d->snapshots[i].guid, idx, 4);
    for (size_t i = 0; i < d->n_images; i++) {
      ploop_descriptor_find_image(d, d->images[i].guid);
      free(ploop_descriptor_image_path(d, &d->images[i]));
    }
    /* Written back (as a snapshot or merge would), it must load again. */
    if (valid && ploop_descriptor_save(d) == 0) {
      struct ploop_descriptor *again = ploop_descriptor_load(dir);
      if (!again) {
        fprintf(stderr, "fuzz: a saved valid descriptor does not load: %s\n", ploop_get_error());
        abort();
      }
      ploop_descriptor_free(again);
    }
    ploop_descriptor_free(d);
    if (valid) {
      struct ploop_disk *disk = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDONLY);
      if (disk) {
        static char buf[4096] __attribute__((aligned(4096)));
        ploop_disk_pread(disk, buf, sizeof buf < ploop_disk_size(disk) ? sizeof buf : 0, 0);
        ploop_disk_close(disk);
      }
    }
  }
  fuzz_rmtree(dir);
  fuzz_check_fds(fds, "descriptor run");
  return 0;
}
