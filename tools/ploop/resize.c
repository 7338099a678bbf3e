/* `ploop resize`: grow or shrink a disk's virtual size: offline, or online
 * through the serving daemon (and the mounted filesystem when attached). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common.h"
#include "control.h"
#include "online.h"

/* Whether the disk starts with a filesystem we can resize (ext2/3/4 magic
 * 0xEF53 at byte 1080, XFS "XFSB" at 0): then offline resize goes through a
 * device-only attach so the filesystem follows the disk. */
static int disk_has_fs(const char *disk, bool *has, uint64_t *cur)
{
  *has = false;
  struct ploop_disk *d = ploop_disk_open(disk, NULL, PLOOP_OPEN_RDONLY);
  if (!d)
    return cli_lib_error();
  void *buf = NULL;
  int rc = 0;
  *cur = ploop_disk_size(d);
  if (posix_memalign(&buf, 4096, 4096) != 0) {
    rc = cli_error(EXIT_GENERIC, "out of memory");
  } else if (ploop_disk_size(d) >= 4096 && ploop_disk_pread(d, buf, 4096, 0) < 0) {
    rc = cli_lib_error();
  } else {
    const unsigned char *b = buf;
    *has = (b[1080] == 0x53 && b[1081] == 0xEF) || memcmp(b, "XFSB", 4) == 0;
  }
  free(buf);
  ploop_disk_close(d);
  return rc;
}

/* Shrinking: the filesystem is shrunk first, then the device range past the
 * new end is discarded, so clusters the filesystem once used there are freed
 * and the disk may shrink without --force (ploop does the same BLKDISCARD). */
static int shrink_fs_and_discard(const char *device, uint64_t size)
{
  char fstype[32];
  if (ploop_fs_probe(device, fstype, sizeof fstype) < 0)
    return cli_lib_error();
  if (ploop_fs_resize_offline(device, fstype, size) < 0)
    return cli_lib_error();
  int fd = open(device, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return cli_error(EXIT_IO, "%s: %s", device, strerror(errno));
  uint64_t cur = 0, range[2];
  int rc = 0;
  if (ioctl(fd, BLKGETSIZE64, &cur) < 0)
    rc = cli_error(EXIT_IO, "%s: size: %s", device, strerror(errno));
  range[0] = size;
  range[1] = cur > size ? cur - size : 0;
  if (!rc && range[1] && ioctl(fd, BLKDISCARD, range) < 0)
    rc = cli_error(EXIT_IO, "%s: discard past %" PRIu64 ": %s", device, size, strerror(errno));
  close(fd);
  return rc;
}

/* Offline resize of a disk holding a filesystem: attach it without mounting,
 * resize disk and filesystem together (shrink: filesystem first), detach. */
static int resize_with_fs(const char *disk, uint64_t size, uint64_t cur)
{
  struct ploop_attach_info info;
  if (ploop_attach_mount(disk, NULL, &info) < 0)
    return cli_lib_error();
  int rc = 0;
  if (size < cur)
    rc = shrink_fs_and_discard(info.device, size);
  if (!rc && ploop_attach_resize(disk, size) < 0)
    rc = cli_lib_error();
  if (ploop_attach_umount(disk) < 0 && rc == 0)
    rc = cli_lib_error();
  return rc;
}

static int run_resize(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"size", required_argument, NULL, 's'},
      {"force", no_argument, NULL, 'f'},
      {0},
  };
  uint64_t size = 0;
  bool have_size = false;
  unsigned flags = 0;
  int c;
  while ((c = cli_getopt(argc, argv, "s:f", longopts)) != -1) {
    switch (c) {
    case 's':
      if (!cli_parse_size("-s", optarg, &size))
        return EXIT_USAGE;
      if (size == 0)
        return cli_usage_error("-s: the size must be greater than zero");
      have_size = true;
      break;
    case 'f':
      flags |= PLOOP_RESIZE_FORCE;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!have_size)
    return cli_usage_error("-s SIZE is required");
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  const char *disk = argv[optind];
  int st = cli_online_state(disk, NULL);
  if (st < 0)
    return -st;
  if (st == CLI_ATTACHED) {
    /* Attached: the loop device and a mounted filesystem follow the disk. */
    if (ploop_attach_resize(disk, size) < 0)
      return cli_lib_error();
  } else if (st == CLI_SERVED) {
    if (ploop_ctl_resize_flags(disk, size, flags) < 0)
      return cli_ctl_error();
  } else {
    bool has_fs = false;
    uint64_t cur = 0;
    int rc = disk_has_fs(disk, &has_fs, &cur);
    if (rc)
      return rc;
    if (has_fs && !(flags & PLOOP_RESIZE_FORCE))
      return resize_with_fs(disk, size, cur);
    if (ploop_resize(disk, size, flags) < 0)
      return cli_lib_error();
  }
  return EXIT_OK;
}

const struct cli_verb verb_resize = {
    .name = "resize",
    .run = run_resize,
    .synopsis = "resize -s SIZE [--force] DISK",
    .summary = "grow or shrink the disk's virtual size",
    .details = "  -s, --size SIZE   the new virtual size (K, M, G, T suffixes)\n"
               "  -f, --force       offline: resize the image only, and shrink it even if\n"
               "                    data lies beyond the new end (that data is lost)\n"
               "A disk holding an ext2/3/4 or XFS filesystem is resized with it: offline\n"
               "through a device-only attach (needs root; a shrink runs e2fsck + resize2fs,\n"
               "discards the device past the new end, then shrinks the disk), online when\n"
               "mounted (grow only).  A bare disk: the image only.\n"
               "When ploop-nbd serves the disk unmounted, the daemon resizes the image\n"
               "(--force is passed on to it).\n",
};
