/* `exec NAME [--env K=V]... [--user UID[:GID]] [--cwd DIR] [--] CMD...`: a
 * new process inside a running container. Options may come before or after
 * NAME; the command starts at "--" or at the first word after NAME. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "container.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

#define EXEC_USAGE "usage: exec NAME [--env K=V]... [--user UID[:GID]] [--cwd DIR] [--] CMD..."

static int parse_id(const char *s, char **end, uint32_t *out)
{
  errno = 0;
  unsigned long v = strtoul(s, end, 10);
  if (errno || *end == s || s[0] == '-' || v > 0xfffffffeul)
    return -1;
  *out = (uint32_t)v;
  return 0;
}

static int parse_user(const char *s, struct ct_exec_opts *eo)
{
  char *end;
  if (parse_id(s, &end, &eo->uid) < 0 || (*end && *end != ':'))
    return ct_usage("--user: '%s' is not UID[:GID] (numbers)", s);
  eo->gid = eo->uid;
  if (*end == ':' && (parse_id(end + 1, &end, &eo->gid) < 0 || *end))
    return ct_usage("--user: '%s' is not UID[:GID] (numbers)", s);
  eo->user_set = true;
  return 0;
}

/* The value of option OPT at argv[*i] ("--opt V" or "--opt=V"), or NULL. */
static const char *value(int argc, char **argv, int *i, const char *opt, const char *shrt)
{
  const char *a = argv[*i];
  size_t n = strlen(opt);
  if (strncmp(a, opt, n) == 0 && a[n] == '=')
    return a + n + 1;
  if (strcmp(a, opt) != 0 && !(shrt && strcmp(a, shrt) == 0))
    return NULL;
  if (*i + 1 >= argc) {
    ct_usage("exec: %s needs a value", opt);
    return "";
  }
  return argv[++*i];
}

int verb_exec(int argc, char **argv)
{
  struct ct_exec_opts eo = {0};
  cleanup_free char **env = calloc((size_t)argc, sizeof *env);
  if (!env)
    return ct_fail(ENOMEM, "exec");
  const char *name = NULL;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i], *v;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-') {
      if (name)
        break;  /* the command */
      name = a;
      continue;
    }
    if ((v = value(argc, argv, &i, "--env", "-e"))) {
      if (!*v || !strchr(v, '=') || v[0] == '=')
        return ct_usage("--env: '%s' is not KEY=VALUE", v);
      env[eo.nenv++] = (char *)v;
    } else if ((v = value(argc, argv, &i, "--user", "-u"))) {
      if (!*v || parse_user(v, &eo) < 0)
        return ct_error_code() == CT_EXIT_USAGE ? -1 : ct_usage("--user needs UID[:GID]");
    } else if ((v = value(argc, argv, &i, "--cwd", "-w"))) {
      if (v[0] != '/')
        return ct_usage("--cwd: '%s' is not an absolute path", v);
      eo.cwd = v;
    } else {
      return ct_usage("exec: bad option '%s' (see exec --help)", a);
    }
  }
  if (!name || i >= argc)
    return ct_usage(EXEC_USAGE);
  eo.env = env;
  int rc = container_exec(name, &argv[i], &eo);
  /* This process may now sit in the container's namespaces (its children
   * in its pid namespace): leave without at-exit handlers, which may fork
   * (LeakSanitizer's stop-the-world tracer spins forever in there). So the
   * error is printed here rather than by main(). */
  if (rc < 0) {
    fprintf(stderr, "ploop-container: %s\n", ct_error());
    rc = ct_error_code();
  }
  fflush(NULL);
  _exit(rc);
}
