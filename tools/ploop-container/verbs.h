/* The verbs of ploop-container: each parses its own options and calls one
 * container_* operation. Return: exit code (>= 0) or -1 with an error set. */
#ifndef CT_VERBS_H
#define CT_VERBS_H

int verb_create(int argc, char **argv);
int verb_run(int argc, char **argv);    /* run and start (argv[0] says which) */
int verb_exec(int argc, char **argv);
int verb_stop(int argc, char **argv);
int verb_list(int argc, char **argv);
int verb_freeze(int argc, char **argv); /* freeze and thaw */
int verb_snapshot(int argc, char **argv);
int verb_mount(int argc, char **argv);  /* mount and umount */
int verb_destroy(int argc, char **argv);
int verb_migrate(int argc, char **argv);
int verb_receive(int argc, char **argv);
int verb_criu(int argc, char **argv);   /* checkpoint and restore */
int verb_update(int argc, char **argv);
int verb_logs(int argc, char **argv);
int verb_snapshot_list(int argc, char **argv);
int verb_snapshot_delete(int argc, char **argv);
int verb_rollback(int argc, char **argv);
int verb_resize(int argc, char **argv);

#endif
