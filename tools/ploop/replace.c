/* `ploop replace`: one delta's file of a disk is replaced by another file
 * holding the same geometry and the same clusters (OpenVZ's ploop replace),
 * e.g. a copy made on other storage. The contents are compared before the
 * descriptor changes, so a wrong file is refused and nothing changes. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bare-delta.h"
#include "common.h"

/* Compares two single-delta disks: size, cluster size, which clusters are
 * held, and their bytes. Returns 0 when equal, else an exit code (printed). */
static int same_contents(const char *old_dir, const char *new_dir, const char *old_name,
                         const char *new_name)
{
  /* The old file may carry the in-use mark of our own writer open. */
  struct ploop_disk *a =
      ploop_disk_open(old_dir, NULL, PLOOP_OPEN_RDONLY | PLOOP_OPEN_NO_LOCK | PLOOP_OPEN_ALLOW_DIRTY);
  if (!a)
    return cli_lib_error();
  struct ploop_disk *b = ploop_disk_open(new_dir, NULL, PLOOP_OPEN_RDONLY | PLOOP_OPEN_NO_LOCK);
  if (!b) {
    int rc = cli_lib_error();
    ploop_disk_close(a);
    return rc;
  }
  int rc = 0;
  uint64_t size = ploop_disk_size(a), cb = ploop_disk_cluster_size(a);
  uint8_t *ba = NULL, *bb = NULL;
  if (size != ploop_disk_size(b) || cb != ploop_disk_cluster_size(b)) {
    rc = cli_error(EXIT_USAGE, "%s: geometry differs from %s (size or cluster size)", new_name, old_name);
    goto out;
  }
  ba = aligned_alloc(4096, cb);
  bb = aligned_alloc(4096, cb);
  if (!ba || !bb) {
    rc = cli_error(EXIT_GENERIC, "out of memory");
    goto out;
  }
  for (uint64_t off = 0; off < size && !rc; off += cb) {
    struct ploop_extent ea, eb;
    size_t len = (size_t)(size - off < cb ? size - off : cb);
    if (ploop_disk_block_status(a, off, len, &ea, 1) < 0 || ploop_disk_block_status(b, off, len, &eb, 1) < 0) {
      rc = cli_lib_error();
      break;
    }
    if ((ea.depth != 0) != (eb.depth != 0)) {
      rc = cli_error(EXIT_USAGE, "%s: cluster at %" PRIu64 " is %s in %s but not in the new file", new_name,
                     off, ea.depth ? "held" : "a hole", old_name);
      break;
    }
    if (!ea.depth)
      continue;
    if (ploop_disk_pread(a, ba, len, off) < 0 || ploop_disk_pread(b, bb, len, off) < 0) {
      rc = cli_lib_error();
      break;
    }
    if (memcmp(ba, bb, len) != 0)
      rc = cli_error(EXIT_USAGE, "%s: contents differ from %s at offset %" PRIu64, new_name, old_name, off);
  }
out:
  free(ba);
  free(bb);
  ploop_disk_close(a);
  ploop_disk_close(b);
  return rc;
}

/* A private directory inside the disk's directory holding a hard link to
 * FILE as root.hds and a descriptor naming it: FILE read as a one-delta disk
 * (opens never follow symlinks out of a disk's directory; a hard link is the
 * file itself). */
static int stage_single(const char *disk_dir, const char *file, char *out, size_t len)
{
  snprintf(out, len, "%s/.replace-XXXXXX", disk_dir);
  if (!mkdtemp(out))
    return cli_error(EXIT_IO, "%s: %s", out, strerror(errno));
  char link_path[PATH_MAX + 32];
  snprintf(link_path, sizeof link_path, "%s/%s", out, PLOOP_DEFAULT_IMAGE_NAME);
  if (link(file, link_path) < 0) {
    int rc = cli_error(EXIT_IO, "%s: link: %s", file, strerror(errno));
    rmdir(out);
    out[0] = 0;
    return rc;
  }
  return descriptor_write_single(out, PLOOP_DEFAULT_IMAGE_NAME, false, 0);
}

static void unstage(char *dir)
{
  static const char *const names[] = {PLOOP_DEFAULT_IMAGE_NAME, PLOOP_DESCRIPTOR_NAME,
                                      PLOOP_DESCRIPTOR_NAME ".lck", PLOOP_DESCRIPTOR_NAME ".tmp"};
  if (!dir[0])
    return;
  char p[PATH_MAX + 64];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
  dir[0] = 0;
}

static int run_replace(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"uuid", required_argument, NULL, 'u'},
      {"level", required_argument, NULL, 'l'},
      {"old", required_argument, NULL, 'o'},
      {"new", required_argument, NULL, 'i'},
      {"keep-name", no_argument, NULL, 'k'},
      {0},
  };
  char uuid[PLOOP_UUID_LEN + 1];
  const char *by_uuid = NULL, *by_file = NULL, *newfile = NULL;
  uint64_t level = 0;
  bool by_level = false, keep_name = false;
  int c, selectors = 0;
  while ((c = cli_getopt(argc, argv, "u:l:o:i:k", longopts)) != -1) {
    switch (c) {
    case 'u':
      if (!cli_parse_uuid("-u", optarg, uuid))
        return EXIT_USAGE;
      by_uuid = uuid;
      selectors++;
      break;
    case 'l':
      if (!cli_parse_uint("-l", optarg, 0, PLOOP_MAX_DELTAS - 1, &level))
        return EXIT_USAGE;
      by_level = true;
      selectors++;
      break;
    case 'o':
      by_file = optarg;
      selectors++;
      break;
    case 'i':
      newfile = optarg;
      break;
    case 'k':
      keep_name = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (selectors != 1)
    return cli_usage_error("give exactly one of -u UUID, -l LEVEL or -o FILE");
  if (!newfile)
    return cli_usage_error("-i NEW_IMAGE is required");
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  const char *disk = argv[optind];

  /* The writer lock (and a refusal when ploop-nbd serves the disk) for the
   * whole replacement: nobody opens the old file while it goes. */
  struct ploop_disk *held = ploop_disk_open(disk, NULL, PLOOP_OPEN_RDWR);
  if (!held)
    return cli_lib_error();
  struct ploop_descriptor *d = ploop_disk_descriptor(held);
  int rc = 0;
  char *oldpath = NULL, newabs[PATH_MAX];
  char so[PATH_MAX] = "", sn[PATH_MAX] = "";
  if (!d) {
    rc = cli_lib_error();
    goto out;
  }
  struct ploop_image_desc *img = NULL;
  if (by_uuid) {
    img = (struct ploop_image_desc *)ploop_descriptor_find_image(d, by_uuid);
    if (!img) {
      rc = cli_error(EXIT_NOSNAP, "%s: no snapshot %s", disk, by_uuid);
      goto out;
    }
  } else if (by_level) {
    size_t idx[PLOOP_MAX_DELTAS];
    int n = ploop_descriptor_chain(d, NULL, idx, PLOOP_MAX_DELTAS);
    if (n < 0) {
      rc = cli_lib_error();
      goto out;
    }
    if (level >= (uint64_t)n) {
      rc = cli_error(EXIT_NOSNAP, "%s: no level %" PRIu64 " (the disk has %d deltas, 0 = base)", disk, level, n);
      goto out;
    }
    img = &d->images[idx[level]];
  } else {
    const char *base = strrchr(by_file, '/') ? strrchr(by_file, '/') + 1 : by_file;
    for (size_t i = 0; i < d->n_images && !img; i++)
      if (strcmp(d->images[i].file, base) == 0)
        img = &d->images[i];
    if (!img) {
      rc = cli_error(EXIT_NOSNAP, "%s: no image %s in the descriptor", disk, by_file);
      goto out;
    }
  }
  if (img->plain) {
    rc = cli_error(EXIT_USAGE, "%s: %s is a raw image; replace takes ploop1 deltas", disk, img->file);
    goto out;
  }
  oldpath = ploop_descriptor_image_path(d, img);
  if (!oldpath) {
    rc = cli_lib_error();
    goto out;
  }
  /* The new file must sit in the disk's directory: the descriptor names
   * images relative to it, and every open stays beneath it. */
  if (!realpath(newfile, newabs)) {
    rc = cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", newfile, strerror(errno));
    goto out;
  }
  char newdir[PATH_MAX];
  snprintf(newdir, sizeof newdir, "%s", newabs);
  dirname(newdir);
  if (strcmp(newdir, d->dir) != 0) {
    rc = cli_error(EXIT_USAGE, "%s: not in the disk's directory %s", newfile, d->dir);
    goto out;
  }
  const char *newname = strrchr(newabs, '/') + 1;
  for (size_t i = 0; i < d->n_images; i++)
    if (strcmp(d->images[i].file, newname) == 0) {
      rc = cli_error(EXIT_USAGE, "%s: is already an image of %s", newfile, disk);
      goto out;
    }
  if ((rc = stage_single(d->dir, oldpath, so, sizeof so)) || (rc = stage_single(d->dir, newabs, sn, sizeof sn)))
    goto out;
  rc = same_contents(so, sn, img->file, newname);
  unstage(so);
  unstage(sn);
  if (rc)
    goto out;
  if (keep_name) {
    /* The new file takes the old one's name: the descriptor stays as is. */
    if (rename(newabs, oldpath) < 0)
      rc = cli_error(EXIT_IO, "%s: rename to %s: %s", newabs, oldpath, strerror(errno));
    goto out;
  }
  char *old_name = img->file;
  img->file = strdup(newname);
  if (!img->file) {
    img->file = old_name;
    rc = cli_error(EXIT_GENERIC, "out of memory");
    goto out;
  }
  free(old_name);
  if (ploop_descriptor_save(d) < 0)
    rc = cli_lib_error();
  else
    printf("%s: %s replaced by %s (the old file is left in place)\n", disk, oldpath, newname);
out:
  unstage(so);
  unstage(sn);
  free(oldpath);
  ploop_descriptor_free(d);
  if (ploop_disk_close(held) < 0 && !rc)
    rc = cli_lib_error();
  return rc;
}

const struct cli_verb verb_replace = {
    .name = "replace",
    .run = run_replace,
    .synopsis = "replace {-u UUID | -l LEVEL | -o FILE} -i NEW_IMAGE [--keep-name] DISK",
    .summary = "replace a delta's file by another one holding the same clusters",
    .details = "  -u, --uuid UUID     the delta of that snapshot (or the top's GUID)\n"
               "  -l, --level N       the N-th delta from the base (0 = base)\n"
               "  -o, --old FILE      the delta whose file is FILE\n"
               "  -i, --new FILE      the new file, in the disk's directory; its geometry,\n"
               "                      held clusters and their bytes must equal the old one's\n"
               "      --keep-name     rename the new file over the old one instead of\n"
               "                      pointing the descriptor at it\n"
               "Refused (exit 17) while the disk is served or locked; a file that differs\n"
               "is refused (exit 38) and nothing changes.\n",
};
