/* The ploop command: dispatches `ploop VERB ARGS...` to one verb's file and
 * prints the global help, the version and the exit-code table. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

extern const struct cli_verb verb_init, verb_info, verb_check, verb_import, verb_export,
    verb_snapshot, verb_snapshot_list, verb_snapshot_delete, verb_snapshot_merge,
    verb_snapshot_switch, verb_resize, verb_convert, verb_restore_descriptor, verb_mount,
    verb_umount, verb_list, verb_compact, verb_balloon, verb_fsck, verb_replace;
extern const struct cli_verb verb_send, verb_receive;

static const struct cli_verb *const verbs[] = {
    &verb_init,          &verb_info,           &verb_check,  &verb_fsck,           &verb_import,
    &verb_export,        &verb_snapshot,       &verb_snapshot_list,   &verb_snapshot_delete,
    &verb_snapshot_merge, &verb_snapshot_switch, &verb_resize,        &verb_convert,
    &verb_restore_descriptor, &verb_mount, &verb_umount, &verb_list, &verb_compact, &verb_balloon,
    &verb_send, &verb_receive, &verb_replace,
};

static const char exit_codes[] =
    "Exit codes (OpenVZ's SYSEXIT_* numbers):\n"
    "  0    success (check: image clean or repaired)\n"
    "  4    cannot open: no such file, image or attachment (SYSEXIT_OPEN)\n"
    "  6    read error reported by the operating system (SYSEXIT_READ)\n"
    "  7    write or sync error reported by the operating system, e.g. disk full (SYSEXIT_WRITE)\n"
    "  11   image or descriptor is corrupt (check: problems remain) (SYSEXIT_PLOOPFMT)\n"
    "  12   other failure, e.g. out of memory (SYSEXIT_SYS)\n"
    "  17   busy: locked by another process, served, or already attached (SYSEXIT_EBUSY)\n"
    "  37   check: the image is marked in use; -d drops the mark (SYSEXIT_PLOOPINUSE)\n"
    "  38   bad command line or argument value (SYSEXIT_PARAM)\n"
    "  43   no such snapshot (SYSEXIT_NOSNAP)\n"
    "  130  interrupted by SIGINT, 143 by SIGTERM (the old state is kept)\n";

const struct cli_verb *cli_find_verb(const char *name)
{
  if (!name)
    return NULL;
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
    if (strcmp(verbs[i]->name, name) == 0)
      return verbs[i];
  return NULL;
}

static void print_help(FILE *f)
{
  fprintf(f, "usage: ploop VERB [OPTIONS] ARGS...\n"
             "       ploop help [VERB] | ploop VERB --help | ploop --version\n\n"
             "Manages ploop (Parallels v2) disk images without kernel modules.\n"
             "A DISK argument is the image's directory or its DiskDescriptor.xml;\n"
             "a DELTA argument is one image file (e.g. DIR/root.hds).\n\nVerbs:\n");
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
    fprintf(f, "  %-19s %s\n", verbs[i]->name, verbs[i]->summary);
  fprintf(f, "\n%s", exit_codes);
}

int main(int argc, char **argv)
{
  if (argc < 2)
    return cli_usage_error("missing verb");
  const char *verb = argv[1];
  if (strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
    print_help(stdout);
    return EXIT_OK;
  }
  if (strcmp(verb, "--version") == 0 || strcmp(verb, "-V") == 0) {
    printf("ploop %s\n", PLOOP_VERSION_STRING);
    return EXIT_OK;
  }
  if (strcmp(verb, "help") == 0) {
    if (argc == 2) {
      print_help(stdout);
      return EXIT_OK;
    }
    const struct cli_verb *v = cli_find_verb(argv[2]);
    if (!v)
      return cli_usage_error("unknown verb '%s'", argv[2]);
    cli_print_verb_help(v, stdout);
    return EXIT_OK;
  }
  const struct cli_verb *v = cli_find_verb(verb);
  if (!v)
    return cli_usage_error("unknown verb '%s'", verb);
  cli_verb_name = v->name;
  optind = 0; /* full getopt re-initialisation (GNU) */
  if (v->interruptible)
    cli_catch_signals();
  int rc = v->run(argc - 1, argv + 1);
  /* A signal that came after the last look at the cancel flag: the verb
   * finished its work, but the caller asked it to stop; say so (the new
   * state is complete, as if the signal had come a moment later). */
  if (rc == EXIT_OK && cli_caught_signal())
    rc = cli_error(cli_caught_signal() == SIGTERM ? EXIT_SIGTERM : EXIT_SIGINT,
                   "interrupted by %s after the work was done",
                   cli_caught_signal() == SIGTERM ? "SIGTERM" : "SIGINT");
  return rc;
}
