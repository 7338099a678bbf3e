/* ploop-container: a minimal container launcher over ploop disks.
 * Global options, verb dispatch, and the one place errors are printed. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "help.h"
#include "libploop.h"
#include "verbs.h"

static const char usage[] =
    "usage: ploop-container [--root DIR] VERB [ARGS]\n"
    "  create NAME [--size 2G] [--from busybox|ROOTFS.tar[.gz]] [--disk ploop|raw]\n"
    "  run NAME [--memory M] [--swap S] [--pids N] [--hostname H] [--net none|host|veth] [--userns]\n"
    "      [--init] [-- CMD...]\n"
    "  start NAME (same options as run; detached, output in ROOT/NAME/console.log)\n"
    "  exec NAME [--env K=V] [--user UID[:GID]] [--cwd DIR] -- CMD...\n"
    "  stop NAME [--timeout SECONDS]\n"
    "  list [--json]                       \"running, monitor gone\" when its monitor died\n"
    "  logs NAME [--follow]                output of detached runs, each headed by its start\n"
    "  freeze NAME | thaw NAME\n"
    "  snapshot NAME [--json]              prints the snapshot id\n"
    "  snapshot-list NAME [--json] | snapshot-delete NAME ID\n"
    "  rollback NAME ID                    (stopped) the disk goes back to snapshot ID\n"
    "  resize NAME SIZE [--json]           grow live; grow or shrink when stopped\n"
    "  mount NAME [--snapshot ID DIR]      keep the disk mounted / mount a snapshot read-only\n"
    "  umount NAME [DIR]\n"
    "  destroy NAME\n"
    "  migrate NAME ADDR:PORT [--offline] [--keep-source] [--json] [--auth FILE]\n"
    "          [--tls-psk FILE | --tls-certificates DIR] ...  (migrate --help)\n"
    "  migrate --resolve NAME [--commit | --abort]\n"
    "  receive --listen ADDR:PORT [--once] [--auth FILE]\n"
    "          [--tls-psk FILE | --tls-certificates DIR] ...  (receive --help)\n"
    "  checkpoint NAME DIR [--criu PATH] [--leave-running]   processes to CRIU images in DIR\n"
    "  restore NAME DIR [--criu PATH] [--lazy-pages]   run the checkpoint in DIR again (detached)\n"
    "  update NAME [--memory M] [--swap S] [--pids N] [limits] [--json]  live, and saved\n"
    "limits (run, start, update): --cpus N.N  --cpu-weight 1-10000  --cpuset LIST\n"
    "  --io-weight 1-10000  --io-limit read|write BPS|Niops (on the container's disk)\n"
"network (create, run, start): --net veth [--ip A/P] [--gateway A] [--host-ip A/P | --bridge BR]\n"
"volumes (run, start): --volume HOST:CT[:ro] (repeatable)\n"
"security (run, start): --cap-add CAP --cap-drop CAP --seccomp default|unconfined --read-only\n"
    "exit codes: the container's status for run/exec; else 0 ok, 1 failure, 2 bad usage,\n"
    "3 no such container, 4 container busy or running (exists, frozen, mounted),\n"
    "5 container not running (or its disk not mounted), 6 migration in doubt\n"
    "VERB --help describes a verb; --version prints the version.\n";

static const struct {
  const char *name;
  int (*fn)(int, char **);
} verbs[] = {
    {"create", verb_create}, {"run", verb_run},       {"start", verb_run},
    {"exec", verb_exec},     {"stop", verb_stop},     {"list", verb_list},
    {"freeze", verb_freeze}, {"thaw", verb_freeze},   {"snapshot", verb_snapshot},
    {"mount", verb_mount},   {"umount", verb_mount},  {"destroy", verb_destroy},
    {"migrate", verb_migrate}, {"receive", verb_receive},
    {"checkpoint", verb_criu}, {"restore", verb_criu},
    {"update", verb_update}, {"logs", verb_logs},
    {"snapshot-list", verb_snapshot_list}, {"snapshot-delete", verb_snapshot_delete},
    {"rollback", verb_rollback}, {"resize", verb_resize},
};

int main(int argc, char **argv)
{
  static const struct option opts[] = {{"root", required_argument, NULL, 'r'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"version", no_argument, NULL, 'V'},
                                       {NULL, 0, NULL, 0}};
  opterr = 0;  /* errors are ours to print, on one line */
  int c;
  while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (c) {
    case 'r':
      ct_root = optarg;
      break;
    case 'h':
      fputs(usage, stdout);
      return 0;
    case 'V':
      printf("ploop-container %s\n", PLOOP_VERSION_STRING);
      return 0;
    default:
      fprintf(stderr, "ploop-container: bad option '%s' (see --help)\n", argv[optind - 1]);
      return CT_EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "ploop-container: no verb given (see --help)\n");
    return CT_EXIT_USAGE;
  }
  if (ct_root[0] != '/') {
    fprintf(stderr, "ploop-container: --root must be an absolute path\n");
    return CT_EXIT_USAGE;
  }
  int vi = optind;
  const char *verb = argv[vi];
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
    if (strcmp(verb, verbs[i].name) != 0)
      continue;
    /* Verbs without an entry in help.c (migrate, receive, checkpoint,
     * restore) print their own. */
    if (ct_wants_help(argc - vi, argv + vi) && ct_verb_help(verb) == 0)
      return 0;
    optind = 0;  /* each verb parses its own argv (argv[0] = the verb) */
    int rc = verbs[i].fn(argc - vi, argv + vi);
    if (rc < 0) {
      fprintf(stderr, "ploop-container: %s\n", ct_error());
      return ct_error_code();
    }
    return rc;
  }
  fprintf(stderr, "ploop-container: unknown verb '%s' (see --help)\n", verb);
  return CT_EXIT_USAGE;
}
