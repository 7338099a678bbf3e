/* `ploop info`: sizes, format and space use of a disk (summed over its
 * deltas) or of one delta file, as text or JSON. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "common.h"
#include "control.h"
#include "online.h"

struct info_image {
  const char *guid;
  const char *file;
  bool plain;
  struct ploop_delta_info di;
};

struct info {
  const char *path;
  bool is_disk;
  uint64_t virtual_bytes, cluster_bytes;
  int version;
  size_t n_images, n_snapshots;
  uint64_t allocated_clusters, file_bytes, disk_bytes;
  bool in_use;
  struct info_image *images;
  int online;                 /* enum cli_online */
  char server_json[8192];     /* the daemon's INFO answer, one JSON object */
  struct ploop_attach_info att;
  bool have_fs;               /* mounted: the filesystem's usage (ploop info -s) */
  uint64_t fs_bytes, fs_used, fs_avail, fs_inodes, fs_inodes_used;
};

static void fill_fs_usage(struct info *in)
{
  struct statvfs v;
  if (!in->att.mount_point[0] || statvfs(in->att.mount_point, &v) < 0)
    return;
  in->have_fs = true;
  in->fs_bytes = (uint64_t)v.f_blocks * v.f_frsize;
  in->fs_used = (uint64_t)(v.f_blocks - v.f_bfree) * v.f_frsize;
  in->fs_avail = (uint64_t)v.f_bavail * v.f_frsize;
  in->fs_inodes = v.f_files;
  in->fs_inodes_used = v.f_files - v.f_ffree;
}

/* The daemon's pid from its INFO JSON ("pid":N), 0 if absent. */
static long server_pid(const char *json)
{
  const char *p = strstr(json, "\"pid\":");
  return p ? strtol(p + 6, NULL, 10) : 0;
}

/* How the attached disk's requests reach the daemon: the FUSE transport
 * from its INFO JSON ("fuse_transport":"io_uring"), or "" if absent. */
static void fuse_transport(const char *json, char *out, size_t len)
{
  const char *p = strstr(json, "\"fuse_transport\":\"");
  out[0] = 0;
  if (p) {
    p += strlen("\"fuse_transport\":\"");
    size_t n = strcspn(p, "\"");
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
  }
}

/* Fills DI for one image; raw (Plain) images have no header, only a size.
 * DESC NULL: PATH is a bare ploop1 delta named on the command line. */
static int image_info(const struct ploop_descriptor *desc, const struct ploop_image_desc *img, const char *path,
                      struct ploop_delta_info *di)
{
  memset(di, 0, sizeof *di);
  if (desc && img->plain) {
    struct stat st;
    if (stat(path, &st) < 0)
      return cli_error(EXIT_NOTFOUND, "%s: %s", path, strerror(errno));
    di->file_bytes = (uint64_t)st.st_size;
    di->disk_bytes = (uint64_t)st.st_blocks * 512;
    di->virtual_bytes = (uint64_t)st.st_size;
    return 0;
  }
  unsigned f = PLOOP_OPEN_RDONLY | PLOOP_OPEN_ALLOW_DIRTY;
  struct ploop_delta *d = desc ? ploop_descriptor_open_image(desc, img, f) : ploop_delta_open(path, f);
  if (!d)
    return cli_lib_error();
  int r = ploop_delta_get_info(d, di);
  int saved = r < 0 ? cli_lib_error() : 0;
  ploop_delta_close(d);
  return saved;
}

static void print_text(const struct info *in)
{
  char a[32], b[32];
  printf("%-18s %s\n", in->is_disk ? "disk:" : "delta:", in->path);
  printf("%-18s %s (%" PRIu64 " bytes)\n", "virtual size:",
         cli_human_bytes(in->virtual_bytes, a, sizeof a), in->virtual_bytes);
  printf("%-18s %s (%" PRIu64 " sectors)\n", "cluster size:",
         cli_human_bytes(in->cluster_bytes, a, sizeof a), in->cluster_bytes / 512);
  if (in->version)
    printf("%-18s %d\n", "format version:", in->version);
  else
    printf("%-18s %s\n", "format:", "raw");
  if (in->is_disk) {
    printf("%-18s %zu\n", "deltas:", in->n_images);
    printf("%-18s %zu\n", "snapshots:", in->n_images ? in->n_images - 1 : 0);
  }
  printf("%-18s %" PRIu64 " clusters (%s)\n", "allocated:", in->allocated_clusters,
         cli_human_bytes(in->allocated_clusters * in->cluster_bytes, a, sizeof a));
  printf("%-18s %s on disk, %s apparent\n", "space used:",
         cli_human_bytes(in->disk_bytes, a, sizeof a), cli_human_bytes(in->file_bytes, b, sizeof b));
  printf("%-18s %s\n", "in use:", in->in_use ? "yes" : "no");
  if (in->is_disk) {
    if (in->online == CLI_OFFLINE)
      printf("%-18s no\n", "served:");
    else
      printf("%-18s yes, ploop-nbd pid %ld\n", "served:", server_pid(in->server_json));
    if (in->online == CLI_ATTACHED) {
      char tr[32];
      fuse_transport(in->server_json, tr, sizeof tr);
      printf("%-18s %s (%s)\n", "device:", in->att.device, in->att.readonly ? "ro" : "rw");
      if (tr[0])
        printf("%-18s loop device on a FUSE file, FUSE over %s\n", "attached by:", tr);
      if (in->att.mount_point[0])
        printf("%-18s %s (%s)\n", "mounted on:", in->att.mount_point, in->att.fstype);
      if (in->have_fs) {
        char c[32];
        printf("%-18s %s used of %s, %s available; inodes %" PRIu64 " used of %" PRIu64 "\n",
               "filesystem:", cli_human_bytes(in->fs_used, a, sizeof a),
               cli_human_bytes(in->fs_bytes, b, sizeof b), cli_human_bytes(in->fs_avail, c, sizeof c),
               in->fs_inodes_used, in->fs_inodes);
      }
    }
  }
  if (in->is_disk && in->n_images > 1) {
    printf("images (base first):\n");
    for (size_t i = 0; i < in->n_images; i++) {
      const struct info_image *im = &in->images[i];
      printf("  %s %s %" PRIu64 " clusters, %s on disk\n", im->guid, im->file,
             im->di.allocated_clusters, cli_human_bytes(im->di.disk_bytes, a, sizeof a));
    }
  }
}

static void print_json(const struct info *in)
{
  printf("{\n  \"path\": ");
  cli_json_string(stdout, in->path);
  printf(",\n  \"type\": \"%s\",\n", in->is_disk ? "disk" : "delta");
  printf("  \"virtual_size\": %" PRIu64 ",\n", in->virtual_bytes);
  printf("  \"cluster_size\": %" PRIu64 ",\n", in->cluster_bytes);
  printf("  \"format\": \"%s\",\n", in->version ? "ploop1" : "raw");
  printf("  \"format_version\": %d,\n", in->version);
  printf("  \"deltas\": %zu,\n", in->n_images);
  printf("  \"allocated_clusters\": %" PRIu64 ",\n", in->allocated_clusters);
  printf("  \"allocated_bytes\": %" PRIu64 ",\n", in->allocated_clusters * in->cluster_bytes);
  printf("  \"disk_bytes\": %" PRIu64 ",\n", in->disk_bytes);
  printf("  \"file_bytes\": %" PRIu64 ",\n", in->file_bytes);
  printf("  \"in_use\": %s", in->in_use ? "true" : "false");
  if (in->is_disk) {
    printf(",\n  \"served\": %s", in->online != CLI_OFFLINE ? "true" : "false");
    if (in->online != CLI_OFFLINE && in->server_json[0])
      printf(",\n  \"server\": %s", in->server_json);
    if (in->online == CLI_ATTACHED) {
      printf(",\n  \"device\": ");
      cli_json_string(stdout, in->att.device);
      printf(",\n  \"mount_point\": ");
      cli_json_string(stdout, in->att.mount_point);
      if (in->have_fs)
        printf(",\n  \"filesystem\": {\"bytes\": %" PRIu64 ", \"used\": %" PRIu64
               ", \"available\": %" PRIu64 ", \"inodes\": %" PRIu64 ", \"inodes_used\": %" PRIu64 "}",
               in->fs_bytes, in->fs_used, in->fs_avail, in->fs_inodes, in->fs_inodes_used);
    }
    printf(",\n  \"images\": [");
    for (size_t i = 0; i < in->n_images; i++) {
      const struct info_image *im = &in->images[i];
      printf("%s\n    {\"guid\": ", i ? "," : "");
      cli_json_string(stdout, im->guid);
      printf(", \"file\": ");
      cli_json_string(stdout, im->file);
      printf(", \"type\": \"%s\", \"allocated_clusters\": %" PRIu64 ", \"disk_bytes\": %" PRIu64
             ", \"file_bytes\": %" PRIu64 "}",
             im->plain ? "raw" : "ploop1", im->di.allocated_clusters, im->di.disk_bytes,
             im->di.file_bytes);
    }
    printf("\n  ]");
  }
  printf("\n}\n");
}

static int info_delta(const char *path, struct info *in)
{
  struct ploop_delta_info di;
  int rc = image_info(NULL, NULL, path, &di);
  if (rc)
    return rc;
  in->virtual_bytes = di.virtual_bytes;
  in->cluster_bytes = di.cluster_bytes;
  in->version = di.version;
  in->n_images = 1;
  in->allocated_clusters = di.allocated_clusters;
  in->file_bytes = di.file_bytes;
  in->disk_bytes = di.disk_bytes;
  in->in_use = di.in_use;
  return 0;
}

/* Sums over every image: the top's chain base first, then any image off it
 * (left by snapshot-switch), which still uses space. */
static int info_disk(struct ploop_descriptor *d, struct info *in)
{
  in->is_disk = true;
  in->virtual_bytes = d->size_sectors * 512;
  in->cluster_bytes = (uint64_t)d->cluster_sectors * 512;
  in->n_images = d->n_images;
  in->images = calloc(d->n_images ? d->n_images : 1, sizeof *in->images);
  if (!in->images)
    return cli_error(EXIT_GENERIC, "out of memory");
  size_t idx[PLOOP_MAX_DELTAS];
  int depth = ploop_descriptor_chain(d, NULL, idx, PLOOP_MAX_DELTAS);
  if (depth < 0)
    return cli_lib_error();
  size_t order[PLOOP_MAX_DELTAS * 2], n = 0;
  bool seen[PLOOP_MAX_DELTAS * 2] = {0};
  for (int i = 0; i < depth; i++) {
    order[n++] = idx[i];
    seen[idx[i]] = true;
  }
  for (size_t i = 0; i < d->n_images && n < sizeof order / sizeof order[0]; i++)
    if (!seen[i])
      order[n++] = i;
  for (size_t k = 0; k < n; k++) {
    const struct ploop_image_desc *img = &d->images[order[k]];
    char *path = ploop_descriptor_image_path(d, img);
    if (!path)
      return cli_lib_error();
    struct info_image *im = &in->images[k];
    im->guid = img->guid;
    im->file = img->file;
    im->plain = img->plain;
    int rc = image_info(d, img, path, &im->di);
    free(path);
    if (rc)
      return rc;
    in->allocated_clusters += img->plain && in->cluster_bytes
                                  ? (im->di.file_bytes + in->cluster_bytes - 1) / in->cluster_bytes
                                  : im->di.allocated_clusters;
    in->file_bytes += im->di.file_bytes;
    in->disk_bytes += im->di.disk_bytes;
    if (strcmp(img->guid, d->top_guid) == 0) {
      /* (Marked in use: a resize may have been killed mid-way; check -F.) */
      if (!img->plain && !im->di.in_use && im->di.virtual_bytes != d->size_sectors * 512)
        return cli_error(EXIT_CORRUPT,
                         "%s: Disk_size %" PRIu64 " sectors in %s disagrees with %s (%" PRIu64
                         " sectors); 'ploop check -F' repairs it",
                         d->dir, d->size_sectors, PLOOP_DESCRIPTOR_NAME, img->file,
                         im->di.virtual_bytes / 512);
      in->in_use = im->di.in_use;
      if (!img->plain)
        in->version = im->di.version;
    }
    if (!in->version && !img->plain)
      in->version = im->di.version;
  }
  return 0;
}

static int run_info(int argc, char **argv)
{
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'}, {0}};
  bool json = false;
  int c;
  while ((c = cli_getopt(argc, argv, "", longopts)) != -1) {
    switch (c) {
    case 'j':
      json = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 1, "DISK or DELTA"))
    return EXIT_USAGE;
  const char *path = argv[optind];
  enum cli_target t;
  int rc = cli_classify(path, &t);
  if (rc)
    return rc;

  struct info in = {.path = path};
  struct ploop_descriptor *d = NULL;
  if (t == CLI_TARGET_DELTA) {
    rc = info_delta(path, &in);
  } else {
    d = ploop_descriptor_load(path);
    if (!d)
      return cli_lib_error();
    if (ploop_descriptor_validate(d) < 0)
      rc = cli_lib_error();
    else
      rc = info_disk(d, &in);
    if (rc == 0) {
      in.online = cli_online_state(path, &in.att);
      if (in.online < 0)
        rc = -in.online;
      else if (in.online != CLI_OFFLINE &&
               ploop_ctl_info(path, in.server_json, sizeof in.server_json) < 0)
        rc = cli_ctl_error();
      if (in.online == CLI_ATTACHED)
        fill_fs_usage(&in);
      /* The answer is one line; keep it so in the JSON we print. */
      in.server_json[strcspn(in.server_json, "\n")] = 0;
    }
  }
  if (rc == 0) {
    if (json)
      print_json(&in);
    else
      print_text(&in);
  }
  free(in.images);
  ploop_descriptor_free(d);
  return rc;
}

const struct cli_verb verb_info = {
    .name = "info",
    .run = run_info,
    .synopsis = "info [--json] DISK|DELTA",
    .summary = "show sizes, format, deltas, space used, and whether it is served/mounted",
    .details = "  --json    print one JSON object (sizes in bytes)\n",
};
