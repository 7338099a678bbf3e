/* `ploop restore-descriptor`: rebuilds DiskDescriptor.xml for a lone base
 * image from its header; also lets export read a bare delta file (one made by
 * `qemu-img convert -O parallels`, say) through a private temporary disk. */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bare-delta.h"
#include "common.h"

int descriptor_write_single(const char *dir, const char *file, bool raw,
                            uint32_t raw_cluster_sectors)
{
  char absdir[PATH_MAX], path[PATH_MAX + 256];
  if (!realpath(dir, absdir))
    return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", dir, strerror(errno));
  snprintf(path, sizeof path, "%s/%s", absdir, file);

  uint64_t size_sectors;
  uint32_t cluster_sectors;
  if (raw) {
    struct stat st;
    if (stat(path, &st) < 0)
      return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", path, strerror(errno));
    if (st.st_size == 0 || st.st_size % 512)
      return cli_error(EXIT_USAGE, "%s: raw image size %lld is not a positive multiple of 512",
                       path, (long long)st.st_size);
    size_sectors = (uint64_t)st.st_size / 512;
    cluster_sectors = raw_cluster_sectors;
  } else {
    struct ploop_delta *d = ploop_delta_open(path, PLOOP_OPEN_RDONLY | PLOOP_OPEN_ALLOW_DIRTY);
    if (!d)
      return cli_lib_error();
    struct ploop_delta_info di;
    int r = ploop_delta_get_info(d, &di);
    int rc = r < 0 ? cli_lib_error() : 0;
    ploop_delta_close(d);
    if (rc)
      return rc;
    size_sectors = di.virtual_bytes / 512;
    cluster_sectors = di.cluster_sectors;
  }

  struct ploop_image_desc img = {.plain = raw};
  struct ploop_snapshot_desc shot = {0};
  snprintf(img.guid, sizeof img.guid, "%s", PLOOP_TOP_GUID);
  snprintf(shot.guid, sizeof shot.guid, "%s", PLOOP_TOP_GUID);
  snprintf(shot.parent, sizeof shot.parent, "%s", PLOOP_NULL_GUID);
  img.file = (char *)file;
  struct ploop_descriptor d = {
      .dir = absdir,
      .size_sectors = size_sectors,
      .cluster_sectors = cluster_sectors,
      /* Legacy CHS geometry, as ploop's ConvertToCHS fills it. */
      .heads = 16,
      .sectors = 63,
      .cylinders = (uint32_t)(size_sectors / (16 * 63)),
      .images = &img,
      .n_images = 1,
      .snapshots = &shot,
      .n_snapshots = 1,
  };
  snprintf(d.top_guid, sizeof d.top_guid, "%s", PLOOP_TOP_GUID);
  if (ploop_descriptor_save(&d) < 0)
    return cli_lib_error();
  return 0;
}

static void remove_dir(const char *dir)
{
  DIR *dp = opendir(dir);
  if (dp) {
    struct dirent *e;
    while ((e = readdir(dp))) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      char p[4096 + 256];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
    closedir(dp);
  }
  rmdir(dir);
}

/* The delta is hard-linked into the private directory, never symlinked:
 * every image path must resolve beneath its disk's directory. A link needs
 * the same filesystem, so the directory is made in TMPDIR first and, when
 * that is another filesystem, beside the delta (removed again at close). */
int bare_delta_open(const char *delta_path, struct bare_delta *b)
{
  char abs[PATH_MAX];
  if (!realpath(delta_path, abs))
    return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", delta_path,
                     strerror(errno));
  struct stat st;
  if (stat(abs, &st) < 0)
    return cli_error(EXIT_IO, "%s: %s", delta_path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return cli_error(EXIT_USAGE, "%s: not a regular file", delta_path);
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", abs);
  const char *tmp = getenv("TMPDIR");
  const char *where[2] = {tmp && *tmp ? tmp : "/tmp", dirname(parent)};
  int err = 0;
  for (int i = 0; i < 2; i++) {
    snprintf(b->dir, sizeof b->dir, "%s/.ploop-bare.XXXXXX", where[i]);
    if (!mkdtemp(b->dir)) {
      err = errno;
      continue;
    }
    b->open = true;
    char link_path[sizeof b->dir + 32];
    snprintf(link_path, sizeof link_path, "%s/%s", b->dir, PLOOP_DEFAULT_IMAGE_NAME);
    if (link(abs, link_path) < 0) {
      err = errno;
      bare_delta_close(b);
      continue;
    }
    int rc = descriptor_write_single(b->dir, PLOOP_DEFAULT_IMAGE_NAME, false, 0);
    if (rc)
      bare_delta_close(b);
    return rc;
  }
  return cli_error(EXIT_IO, "%s: cannot link it into a private directory (in %s or beside it): %s",
                   delta_path, where[0], strerror(err));
}

void bare_delta_close(struct bare_delta *b)
{
  if (b->open)
    remove_dir(b->dir);
  b->open = false;
}

static int run_restore_descriptor(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"format", required_argument, NULL, 'f'},
      {"blocksize", required_argument, NULL, 'b'},
      {0},
  };
  bool raw = false;
  uint64_t bs = PLOOP_DEFAULT_CLUSTER_SECTORS;
  bool have_bs = false;
  int c;
  while ((c = cli_getopt(argc, argv, "f:b:", longopts)) != -1) {
    switch (c) {
    case 'f':
      if (strcmp(optarg, "raw") == 0)
        raw = true;
      else if (strcmp(optarg, "ploop1") != 0 && strcmp(optarg, "expanded") != 0)
        return cli_usage_error("-f: unknown image format '%s' (raw or ploop1)", optarg);
      break;
    case 'b':
      if (!cli_parse_uint("-b", optarg, PLOOP_MIN_CLUSTER_SECTORS, PLOOP_MAX_CLUSTER_SECTORS, &bs))
        return EXIT_USAGE;
      if (bs & (bs - 1))
        return cli_usage_error("-b: cluster size %s sectors is not a power of two", optarg);
      have_bs = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 2, "DIR and IMAGE"))
    return EXIT_USAGE;
  if (have_bs && !raw)
    return cli_usage_error("-b applies to -f raw only; a ploop1 image has its own cluster size");
  const char *dir = argv[optind], *image = argv[optind + 1];

  /* The image must sit in DIR itself: descriptors name files relative to it. */
  char absdir[PATH_MAX], absimg[PATH_MAX];
  if (!realpath(dir, absdir))
    return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", dir, strerror(errno));
  if (!realpath(image, absimg))
    return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", image, strerror(errno));
  char imgdir[PATH_MAX];
  snprintf(imgdir, sizeof imgdir, "%s", absimg);
  if (strcmp(dirname(imgdir), absdir) != 0)
    return cli_error(EXIT_USAGE, "%s: image is not in directory %s", image, dir);
  char xml[PATH_MAX + 32];
  snprintf(xml, sizeof xml, "%s/%s", absdir, PLOOP_DESCRIPTOR_NAME);
  if (access(xml, F_OK) == 0)
    return cli_error(EXIT_USAGE, "%s exists; remove it first to rebuild it", xml);
  return descriptor_write_single(absdir, absimg + strlen(absdir) + 1, raw, (uint32_t)bs);
}

const struct cli_verb verb_restore_descriptor = {
    .name = "restore-descriptor",
    .run = run_restore_descriptor,
    .synopsis = "restore-descriptor [-f raw|ploop1] [-b SECTORS] DIR IMAGE",
    .summary = "write DIR/DiskDescriptor.xml for a lone base image found in DIR",
    .details = "  -f, --format raw|ploop1   the image's format (default ploop1: read its header)\n"
               "  -b, --blocksize SECTORS   cluster size for a raw image (default 2048)\n"
               "Refuses to overwrite an existing DiskDescriptor.xml.\n",
};
