/* libFuzzer harness: an image file's header and BAT, opened as the verbs
 * open them. The input is written as DIR/root.hds; it is opened as a delta
 * (ploop info), checked read-only (ploop check), and, when it opens, served
 * as a one-delta disk whose clusters are read and mapped (ploop mount/nbd). */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-common.h"
#include "libploop.h"

static void write_descriptor(const char *dir, const struct ploop_delta_info *info) {
  char path[PATH_MAX], xml[2048];
  uint64_t sectors = info->virtual_bytes / PLOOP_SECTOR_SIZE;
  int n = snprintf(xml, sizeof xml,
                   "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                   "<Parallels_disk_image Version=\"1.0\">\n"
                   "<Disk_Parameters><Disk_size>%llu</Disk_size><Cylinders>0</Cylinders>"
                   "<Heads>16</Heads><Sectors>63</Sectors><Padding>0</Padding></Disk_Parameters>\n"
                   "<StorageData><Storage><Start>0</Start><End>%llu</End><Blocksize>%u</Blocksize>\n"
                   "<Image><GUID>%s</GUID><Type>Compressed</Type><File>root.hds</File></Image>\n"
                   "</Storage></StorageData>\n"
                   "<Snapshots><TopGUID>%s</TopGUID><Shot><GUID>%s</GUID><ParentGUID>%s</ParentGUID></Shot>"
                   "</Snapshots>\n</Parallels_disk_image>\n",
                   (unsigned long long)sectors, (unsigned long long)sectors, info->cluster_sectors,
                   PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_TOP_GUID, PLOOP_NULL_GUID);
  snprintf(path, sizeof path, "%s/%s", dir, PLOOP_DESCRIPTOR_NAME);
  fuzz_write_file(path, (const uint8_t *)xml, (size_t)n);
}

/* Reads the start of a few clusters: the first ones, the last, and two the
 * input's own bytes choose; asks the allocation map and a mapping too. */
static void read_disk(const char *dir, const uint8_t *data, size_t size) {
  struct ploop_disk *disk = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDONLY | PLOOP_OPEN_ALLOW_DIRTY);
  if (!disk) return;
  uint64_t vsize = ploop_disk_size(disk), cb = ploop_disk_cluster_size(disk);
  if (vsize == 0 || cb == 0) {
    ploop_disk_close(disk);
    return;
  }
  uint64_t clusters = (vsize + cb - 1) / cb;
  uint64_t pick[6] = {0, 1, 2, clusters - 1, 0, 0};
  if (size >= 16) {
    memcpy(&pick[4], data + size - 16, 8);
    memcpy(&pick[5], data + size - 8, 8);
    pick[4] %= clusters;
    pick[5] %= clusters;
  }
  static char buf[8192] __attribute__((aligned(4096)));
  for (unsigned i = 0; i < 6; i++) {
    uint64_t off = pick[i] * cb;
    if (off >= vsize) continue;
    size_t len = vsize - off < sizeof buf ? (size_t)(vsize - off) : sizeof buf;
    ploop_disk_pread(disk, buf, len, off);
    if (len > 1) ploop_disk_pread(disk, buf + 1, len - 1 < 600 ? len - 1 : 600, off + 1); /* unaligned path */
    struct ploop_mapping m;
    if (ploop_disk_map(disk, off, 512 < len ? 512 : len, 0, &m) == PLOOP_MAP_FILE) ploop_disk_unmap(disk);
  }
  struct ploop_extent ext[16];
  ploop_disk_block_status(disk, 0, vsize, ext, 16);
  ploop_disk_close(disk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fds = fuzz_count_fds();
  char dir[PATH_MAX], path[PATH_MAX];
  fuzz_tmpdir(dir);
  snprintf(path, sizeof path, "%s/%s", dir, PLOOP_DEFAULT_IMAGE_NAME);
  fuzz_write_file(path, data, size);

  struct ploop_delta *d = ploop_delta_open(path, PLOOP_OPEN_RDONLY | PLOOP_OPEN_ALLOW_DIRTY);
  struct ploop_delta_info info;
  bool opened = false;
  if (d) {
    opened = ploop_delta_get_info(d, &info) == 0;
    ploop_delta_close(d);
  }
  struct ploop_check_report r;
  memset(&r, 0, sizeof r);
  if (ploop_delta_check(path, PLOOP_CHECK_READONLY | PLOOP_CHECK_FORCE, &r) >= 0) {
    char msg[1024];
    ploop_check_report_format(&r, msg, sizeof msg);
  }
  if (opened && info.cluster_sectors > 0) {
    write_descriptor(dir, &info);
    read_disk(dir, data, size);
  }
  fuzz_rmtree(dir);
  fuzz_check_fds(fds, "delta run");
  return 0;
}
