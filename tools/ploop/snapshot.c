/* Snapshot verbs: snapshot, snapshot-list, snapshot-delete, snapshot-merge,
 * snapshot-switch.  Each is a thin layer over the library's snapshot calls. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "control.h"
#include "online.h"

/* Parses the common "[-u UUID] DISK" shape; REQUIRE_UUID makes -u mandatory. */
static int parse_uuid_disk(int argc, char **argv, bool require_uuid, char *uuid, bool *have_uuid,
                           const char **disk)
{
  static const struct option longopts[] = {{"uuid", required_argument, NULL, 'u'}, {0}};
  *have_uuid = false;
  int c;
  while ((c = cli_getopt(argc, argv, "u:", longopts)) != -1) {
    switch (c) {
    case 'u':
      if (!cli_parse_uuid("-u", optarg, uuid))
        return EXIT_USAGE;
      *have_uuid = true;
      break;
    case 'h':
      return -1;
    default:
      return EXIT_USAGE;
    }
  }
  if (require_uuid && !*have_uuid)
    return cli_usage_error("-u UUID is required");
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  *disk = argv[optind];
  return 0;
}

static int run_snapshot(int argc, char **argv)
{
  char uuid[PLOOP_UUID_LEN + 1], out[PLOOP_UUID_LEN + 1];
  bool have;
  const char *disk = NULL;
  int rc = parse_uuid_disk(argc, argv, false, uuid, &have, &disk);
  if (rc)
    return rc < 0 ? EXIT_OK : rc;
  struct ploop_attach_info att;
  int st = cli_online_state(disk, &att);
  if (st < 0)
    return -st;
  /* A mounted disk is frozen around the snapshot so its journal is clean in it. */
  if (st == CLI_ATTACHED) {
    if (ploop_attach_snapshot(disk, have ? uuid : NULL, out) < 0)
      return cli_lib_error();
  } else if (st == CLI_SERVED) {
    if (ploop_ctl_snapshot(disk, have ? uuid : NULL, out) < 0)
      return cli_ctl_error();
  } else if (ploop_snapshot_create(disk, have ? uuid : NULL, out) < 0) {
    return cli_lib_error();
  }
  printf("%s\n", out);
  return EXIT_OK;
}

/* A served disk: deleting a snapshot with one child is merging that child
 * into it (the child's state stays, under the child's GUID), which the
 * daemon does online, as snapshot-merge does. */
static int delete_online(const char *disk, const char *uuid)
{
  struct ploop_descriptor *d = ploop_descriptor_load(disk);
  if (!d)
    return cli_lib_error();
  int rc = 0;
  const char *child = NULL;
  size_t children = 0;
  bool found = false;
  for (size_t i = 0; i < d->n_snapshots; i++) {
    if (strcmp(d->snapshots[i].guid, uuid) == 0)
      found = true;
    if (strcmp(d->snapshots[i].parent, uuid) == 0) {
      child = d->snapshots[i].guid;
      children++;
    }
  }
  if (!found)
    rc = cli_error(EXIT_NOSNAP, "%s: no snapshot %s", disk, uuid);
  else if (strcmp(uuid, d->top_guid) == 0)
    rc = cli_error(EXIT_USAGE, "%s: %s is the current top; it cannot be deleted", disk, uuid);
  else if (children > 1)
    rc = cli_error(EXIT_USAGE, "%s: snapshot %s has %zu children; delete them first", disk, uuid, children);
  else if (children == 0)
    rc = cli_error(EXIT_BUSY,
                   "%s: snapshot %s is not under the served top; deleting it needs the disk stopped "
                   "(ploop umount)",
                   disk, uuid);
  else if (ploop_ctl_merge(disk, strcmp(child, d->top_guid) == 0 ? NULL : child, false) < 0)
    rc = cli_ctl_error();
  ploop_descriptor_free(d);
  return rc;
}

/* The common start of snapshot-delete and -switch: -u GUID and DISK, then
 * whether ploop-nbd serves it. 0 with *ST set, or the exit code to return. */
static int parse_snapshot_target(int argc, char **argv, char *uuid, const char **disk, int *st)
{
  bool have;
  int rc = parse_uuid_disk(argc, argv, true, uuid, &have, disk);
  if (rc)
    return rc < 0 ? -1 : rc;
  *st = cli_online_state(*disk, NULL);
  return *st < 0 ? -*st : 0;
}

static int run_snapshot_delete(int argc, char **argv)
{
  char uuid[PLOOP_UUID_LEN + 1];
  const char *disk = NULL;
  int st;
  int rc = parse_snapshot_target(argc, argv, uuid, &disk, &st);
  if (rc)
    return rc < 0 ? EXIT_OK : rc;
  if (st != CLI_OFFLINE)
    return delete_online(disk, uuid);
  if (ploop_snapshot_delete(disk, uuid) < 0)
    return cli_lib_error();
  return EXIT_OK;
}

static int run_snapshot_switch(int argc, char **argv)
{
  char uuid[PLOOP_UUID_LEN + 1];
  const char *disk = NULL;
  int st;
  int rc = parse_snapshot_target(argc, argv, uuid, &disk, &st);
  if (rc)
    return rc < 0 ? EXIT_OK : rc;
  /* Refused while served, by design and as OpenVZ does ("on running
   * device"; vzctl stops the container first): the switch drops the live
   * top, so every user of the device (a mounted filesystem, an NBD client's
   * page cache) would see its blocks change under it. Exit 17 (busy, as
   * every verb refused on a served disk) where OpenVZ says SYSEXIT_PARAM. */
  if (st != CLI_OFFLINE) {
    struct ploop_attach_info att;
    const char *what = "Unable to perform switch to snapshot operation on running device";
    if (st == CLI_ATTACHED && ploop_attach_find(disk, &att) == 0)
      return cli_error(EXIT_BUSY, "%s: %s (%s%s%s): ploop umount it first", disk, what, att.device,
                       att.mount_point[0] ? " mounted on " : "", att.mount_point);
    return cli_error(EXIT_BUSY, "%s: %s (served by ploop-nbd): stop that ploop-nbd first", disk, what);
  }
  if (ploop_snapshot_switch(disk, uuid) < 0)
    return cli_lib_error();
  return EXIT_OK;
}

static int run_snapshot_merge(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"uuid", required_argument, NULL, 'u'},
      {"all", no_argument, NULL, 'A'},
      {0},
  };
  char uuid[PLOOP_UUID_LEN + 1];
  bool have = false, all = false;
  int c;
  while ((c = cli_getopt(argc, argv, "u:A", longopts)) != -1) {
    switch (c) {
    case 'u':
      if (!cli_parse_uuid("-u", optarg, uuid))
        return EXIT_USAGE;
      have = true;
      break;
    case 'A':
      all = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (have && all)
    return cli_usage_error("-u and -A exclude each other");
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  const char *disk = argv[optind];
  int st = cli_online_state(disk, NULL);
  if (st < 0)
    return -st;
  if (st != CLI_OFFLINE) {
    if (ploop_ctl_merge(disk, have ? uuid : NULL, all) < 0)
      return cli_ctl_error();
    return EXIT_OK;
  }
  struct cli_progress prog;
  cli_progress_init(&prog, "merge");
  int rc = ploop_snapshot_merge(disk, have ? uuid : NULL, all, cli_progress_cb, &prog);
  cli_progress_end(&prog);
  if (rc < 0)
    return cli_lib_error();
  return EXIT_OK;
}

/* ---- snapshot-list ---- */

enum list_field { F_UUID, F_PARENT, F_CURRENT, F_FNAME, F_TEMPORARY, F_COUNT };
static const struct {
  const char *name, *header;
  int width;
} list_fields[F_COUNT] = {
    [F_UUID] = {"uuid", "UUID", PLOOP_UUID_LEN},
    [F_PARENT] = {"parent_uuid", "PARENT_UUID", PLOOP_UUID_LEN},
    [F_CURRENT] = {"current", "C", 1},
    [F_FNAME] = {"fname", "FNAME", 0},
    [F_TEMPORARY] = {"temporary", "T", 1},
};

static int parse_fields(const char *spec, int *fields, int *n)
{
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  *n = 0;
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int f = 0;
    while (f < F_COUNT && strcmp(list_fields[f].name, tok) != 0)
      f++;
    if (f == F_COUNT)
      return cli_usage_error("-o: unknown field '%s' (uuid, parent_uuid, current, fname, temporary)",
                             tok);
    if (*n == F_COUNT * 2)
      return cli_usage_error("-o: too many fields");
    fields[(*n)++] = f;
  }
  if (*n == 0)
    return cli_usage_error("-o: no fields given");
  return 0;
}

static const char *snapshot_file(const struct ploop_descriptor *d, const char *guid, char **owned)
{
  const struct ploop_image_desc *img = ploop_descriptor_find_image(d, guid);
  *owned = img ? ploop_descriptor_image_path(d, img) : NULL;
  return *owned ? *owned : "";
}

static int run_snapshot_list(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"output", required_argument, NULL, 'o'},
      {"no-header", no_argument, NULL, 'H'},
      {"uuid", required_argument, NULL, 'u'},
      {"json", no_argument, NULL, 'j'},
      {0},
  };
  int fields[F_COUNT * 2] = {F_PARENT, F_CURRENT, F_UUID, F_FNAME}, nfields = 4;
  bool header = true, json = false, have_uuid = false;
  char uuid[PLOOP_UUID_LEN + 1];
  int c, rc;
  while ((c = cli_getopt(argc, argv, "o:Hu:", longopts)) != -1) {
    switch (c) {
    case 'o':
      if ((rc = parse_fields(optarg, fields, &nfields)))
        return rc;
      break;
    case 'H':
      header = false;
      break;
    case 'u':
      if (!cli_parse_uuid("-u", optarg, uuid))
        return EXIT_USAGE;
      have_uuid = true;
      break;
    case 'j':
      json = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  const char *disk = argv[optind];
  struct ploop_descriptor *d = ploop_descriptor_load(disk);
  if (!d)
    return cli_lib_error();
  if (have_uuid && !ploop_descriptor_find_image(d, uuid)) {
    ploop_descriptor_free(d);
    return cli_error(EXIT_NOSNAP, "%s: no snapshot %s", disk, uuid);
  }

  if (json)
    printf("[");
  else if (header) {
    for (int i = 0; i < nfields; i++) {
      int w = i == nfields - 1 ? 0 : list_fields[fields[i]].width;
      printf("%s%-*s", i ? " " : "", w, list_fields[fields[i]].header);
    }
    printf("\n");
  }
  bool first = true;
  for (size_t s = 0; s < d->n_snapshots; s++) {
    const struct ploop_snapshot_desc *sn = &d->snapshots[s];
    if (have_uuid && strcmp(sn->guid, uuid) != 0)
      continue;
    bool current = strcmp(sn->guid, d->top_guid) == 0;
    char *owned;
    const char *fname = snapshot_file(d, sn->guid, &owned);
    if (json) {
      printf("%s\n  {\"uuid\": \"%s\", \"parent_uuid\": \"%s\", \"current\": %s, "
             "\"temporary\": %s, \"fname\": ",
             first ? "" : ",", sn->guid, sn->parent, current ? "true" : "false",
             sn->temporary ? "true" : "false");
      cli_json_string(stdout, fname);
      printf("}");
    } else {
      for (int i = 0; i < nfields; i++) {
        int w = i == nfields - 1 ? 0 : list_fields[fields[i]].width;
        const char *val = "";
        switch (fields[i]) {
        case F_UUID:
          val = sn->guid;
          break;
        case F_PARENT:
          val = sn->parent;
          break;
        case F_CURRENT:
          val = current ? "*" : " ";
          break;
        case F_FNAME:
          val = fname;
          break;
        case F_TEMPORARY:
          val = sn->temporary ? "T" : " ";
          break;
        }
        printf("%s%-*s", i ? " " : "", w, val);
      }
      printf("\n");
    }
    first = false;
    free(owned);
  }
  if (json)
    printf("%s]\n", first ? "" : "\n");
  ploop_descriptor_free(d);
  return EXIT_OK;
}

const struct cli_verb verb_snapshot = {
    .name = "snapshot",
    .run = run_snapshot,
    .synopsis = "snapshot [-u UUID] DISK",
    .summary = "take a snapshot (the top becomes read-only); prints the snapshot's UUID",
    .details = "  -u, --uuid UUID   the new snapshot's UUID (default: a random one)\n"
               "Online when ploop-nbd serves the disk (a mounted filesystem is frozen\n"
               "around it), offline otherwise.\n",
};

const struct cli_verb verb_snapshot_list = {
    .name = "snapshot-list",
    .run = run_snapshot_list,
    .synopsis = "snapshot-list [-o FIELD,...] [-H] [-u UUID] [--json] DISK",
    .summary = "list the disk's images and snapshots",
    .details = "  -o, --output FIELDS   columns: uuid, parent_uuid, current, fname, temporary\n"
               "                        (default parent_uuid,current,uuid,fname)\n"
               "  -H, --no-header       no header line\n"
               "  -u, --uuid UUID       only that snapshot\n"
               "  --json                a JSON array of {uuid, parent_uuid, current,\n"
               "                        temporary, fname}\n"
               "The current (writable top) image is marked '*'.\n",
};

const struct cli_verb verb_snapshot_delete = {
    .name = "snapshot-delete",
    .run = run_snapshot_delete,
    .synopsis = "snapshot-delete -u UUID DISK",
    .summary = "delete a snapshot (its data is merged into its only child if needed)",
    .details = "  -u, --uuid UUID   the snapshot to delete (not the current top)\n"
               "Online when ploop-nbd serves the disk (its one child is merged into it).\n",
    .interruptible = true,
};

const struct cli_verb verb_snapshot_merge = {
    .name = "snapshot-merge",
    .run = run_snapshot_merge,
    .synopsis = "snapshot-merge [-u UUID | -A] DISK",
    .summary = "merge a snapshot into its parent, or every delta into the base",
    .details = "  -u, --uuid UUID   the snapshot to merge into its parent (the parent's\n"
               "                    state is gone after, UUID keeps its own)\n"
               "                    default: the current top into the snapshot below it\n"
               "  -A, --all         merge every delta down into the base image\n"
               "Online when ploop-nbd serves the disk, offline otherwise.\n"
               "SIGINT/SIGTERM stop an offline merge (exit 130/143); the disk reads as\n"
               "before and running the merge again finishes it.\n",
    .interruptible = true,
};

const struct cli_verb verb_snapshot_switch = {
    .name = "snapshot-switch",
    .run = run_snapshot_switch,
    .synopsis = "snapshot-switch -u UUID DISK",
    .summary = "revert the disk to a snapshot (the current top's changes are dropped)",
    .details = "  -u, --uuid UUID   the snapshot to switch to\n"
               "Offline only, as in OpenVZ: refused (exit 17) while ploop-nbd serves the\n"
               "disk, mounted or not, since its users would see the blocks change.\n",
};
