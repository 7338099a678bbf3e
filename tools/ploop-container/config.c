/* Container directory, config and runtime state files (see config.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "error.h"
#include "util.h"

const char *ct_root = CT_DEFAULT_ROOT;

int ct_check_name(const char *name)
{
  size_t n = strlen(name);
  if (n == 0 || n > CT_NAME_MAX)
    return ct_usage("container name must be 1-%d characters", CT_NAME_MAX);
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (i > 0 && (c == '-' || c == '_' || c == '.'));
    if (!ok)
      return ct_usage("invalid container name '%s' (letters, digits, - _ . allowed)", name);
  }
  return 0;
}

char *ct_path(const char *name, const char *sub)
{
  return sub ? xasprintf("%s/%s/%s", ct_root, name, sub) : xasprintf("%s/%s", ct_root, name);
}

bool ct_exists(const char *name)
{
  cleanup_free char *p = ct_path(name, "config");
  return access(p, F_OK) == 0;
}

int ct_require(const char *name)
{
  if (ct_check_name(name) < 0)
    return -1;
  if (!ct_exists(name)) {
    ct_fail(0, "no container named '%s' (under %s)", name, ct_root);
    ct_set_error_code(CT_EXIT_NOTFOUND);
    return -1;
  }
  return 0;
}

/* ---- key=value files ---- */

typedef void (*kv_fn)(void *obj, const char *key, const char *val);

static int kv_load(const char *path, void *obj, kv_fn fn)
{
  char buf[4096];
  if (read_file(path, buf, sizeof buf) < 0)
    return -1;
  char *save = NULL;
  for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char *eq = strchr(line, '=');
    if (!eq)
      continue;
    *eq = 0;
    fn(obj, line, eq + 1);
  }
  return 0;
}

static void config_kv(void *obj, const char *k, const char *v)
{
  struct ct_config *c = obj;
  if (!strcmp(k, "name"))
    snprintf(c->name, sizeof c->name, "%s", v);
  else if (!strcmp(k, "disk_bytes"))
    c->disk_bytes = strtoull(v, NULL, 10);
  else if (!strcmp(k, "source"))
    snprintf(c->source, sizeof c->source, "%s", v);
}

int ct_config_save(const struct ct_config *c)
{
  cleanup_free char *path = ct_path(c->name, "config");
  cleanup_free char *s = xasprintf("name=%s\ndisk_bytes=%" PRIu64 "\nsource=%s\n", c->name,
                                   c->disk_bytes, c->source);
  if (access(path, F_OK) == 0) {  /* keep the keys other modules set (network, limits) */
    const char *kv[] = {xasprintf("name=%s", c->name), xasprintf("disk_bytes=%" PRIu64, c->disk_bytes),
                        xasprintf("source=%s", c->source)};
    int rc = ct_kv_set(c->name, "config", kv, 3, true);
    for (int i = 0; i < 3; i++)
      free((char *)kv[i]);
    return rc;
  }
  return write_file_atomic(path, s, strlen(s), true);
}

int ct_config_load(const char *name, struct ct_config *c)
{
  memset(c, 0, sizeof *c);
  cleanup_free char *path = ct_path(name, "config");
  if (kv_load(path, c, config_kv) < 0)
    return ct_wrap("container %s", name);
  return 0;
}

static void state_kv(void *obj, const char *k, const char *v)
{
  struct ct_state *s = obj;
  uint64_t n = strtoull(v, NULL, 10);
  if (!strcmp(k, "monitor_pid"))
    s->monitor_pid = (pid_t)n;
  else if (!strcmp(k, "init_pid"))
    s->init_pid = (pid_t)n;
  else if (!strcmp(k, "init_start"))
    s->init_start = n;
  else if (!strcmp(k, "userns"))
    s->userns = n;
  else if (!strcmp(k, "kept_mounted"))
    s->kept_mounted = n;
  else if (!strcmp(k, "memory"))
    s->memory = n;
  else if (!strcmp(k, "swap"))
    s->swap = n;
  else if (!strcmp(k, "pids"))
    s->pids = n;
}

int ct_state_save(const char *name, const struct ct_state *s)
{
  cleanup_free char *path = ct_path(name, "state");
  cleanup_free char *txt = xasprintf(
      "monitor_pid=%d\ninit_pid=%d\ninit_start=%" PRIu64 "\nuserns=%d\nkept_mounted=%d\n"
      "memory=%" PRIu64 "\nswap=%" PRIu64 "\npids=%" PRIu64 "\n",
      (int)s->monitor_pid, (int)s->init_pid, s->init_start, s->userns, s->kept_mounted,
      s->memory, s->swap, s->pids);
  return write_file_atomic(path, txt, strlen(txt), false);
}

int ct_state_load(const char *name, struct ct_state *s)
{
  memset(s, 0, sizeof *s);
  cleanup_free char *path = ct_path(name, "state");
  if (access(path, F_OK) < 0)
    return 0;
  if (kv_load(path, s, state_kv) < 0)
    return -1;
  return 1;
}

void ct_state_remove(const char *name)
{
  cleanup_free char *path = ct_path(name, "state");
  unlink(path);
}

bool ct_state_running(const struct ct_state *s)
{
  return s->init_pid > 0 && process_start_time(s->init_pid) == s->init_start;
}

int ct_lock(const char *name)
{
  cleanup_free char *path = ct_path(name, "lock");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return ct_fail(errno, "open %s", path);
  /* A holder of a container that does not run is a short verb or a
   * monitor finishing its clean-up after the container ended (its state
   * already says stopped): wait for it, up to 5 s, rather than say busy to
   * a `start` that follows the end of a run. */
  struct ct_state st;
  int saved = 0;
  for (int i = 0; i < 250; i++) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
      return fd;
    saved = errno;
    if (saved != EWOULDBLOCK)
      break;
    if (ct_state_load(name, &st) > 0 && ct_state_running(&st))
      break;
    usleep(20000);
  }
  close(fd);
  if (saved != EWOULDBLOCK)
    return ct_fail(saved, "lock %s", path);
  if (ct_state_load(name, &st) > 0 && ct_state_running(&st))
    ct_fail(0, "container %s is running (pid %d)", name, (int)st.init_pid);
  else
    ct_fail(0, "container %s is busy (another ploop-container holds it)", name);
  ct_set_error_code(CT_EXIT_BUSY);
  return -1;
}

int ct_run_opts_check(struct ct_run_opts *o)
{
  const uint64_t min_memory = 4u << 20;
  if (o->memory && o->memory < min_memory)
  {
    char m[32];
    format_size(o->memory, m, sizeof m);
    return ct_usage("--memory %s is below the 4M minimum", m);
  }
  if (o->swap_set && !o->memory)
    return ct_usage("--swap needs --memory (swap is granted on top of RAM)");
  if (o->memory && o->swap > UINT64_MAX - o->memory)
    return ct_usage("--memory + --swap overflows");
  if (o->pids == 1)
    return ct_usage("--pids 1 leaves no room for even a shell's children");
  return 0;
}

/* ---- keys of other modules in the config and state files ---- */

/* A line "KEY=..." of TXT, or NULL. */
static const char *kv_find(const char *txt, const char *key)
{
  size_t kl = strlen(key);
  for (const char *l = txt; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (strncmp(l, key, kl) == 0 && l[kl] == '=')
      return l;
  return NULL;
}

int ct_kv_get(const char *name, const char *file, const char *key, char *val, size_t len)
{
  char buf[8192];
  cleanup_free char *path = ct_path(name, file);
  if (access(path, F_OK) < 0)
    return 0;
  if (read_file(path, buf, sizeof buf) < 0)
    return -1;
  const char *l = kv_find(buf, key);
  if (!l)
    return 0;
  l += strlen(key) + 1;
  size_t n = strcspn(l, "\n");
  snprintf(val, len, "%.*s", (int)n, l);
  return 1;
}

int ct_kv_set(const char *name, const char *file, const char *const *kv, size_t n, bool durable)
{
  char old[8192] = "";
  cleanup_free char *path = ct_path(name, file);
  if (access(path, F_OK) == 0 && read_file(path, old, sizeof old) < 0)
    return -1;
  size_t cap = strlen(old) + 1;
  for (size_t i = 0; i < n; i++)
    cap += strlen(kv[i]) + 2;
  cleanup_free char *out = calloc(1, cap);
  if (!out)
    return ct_fail(ENOMEM, "update %s", path);
  size_t len = 0;
  /* Old lines whose key is not being set, in their order, then the new ones. */
  for (char *l = old; *l;) {
    size_t ll = strcspn(l, "\n");
    bool replaced = false;
    for (size_t i = 0; i < n && !replaced; i++) {
      size_t kl = strcspn(kv[i], "=");
      replaced = ll > kl && strncmp(l, kv[i], kl + 1) == 0;
    }
    if (!replaced && ll) {
      memcpy(out + len, l, ll);
      len += ll;
      out[len++] = '\n';
    }
    l += ll + (l[ll] == '\n');
  }
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(kv[i], '=');
    if (!eq || !eq[1])  /* "key=" removes the key */
      continue;
    len += (size_t)sprintf(out + len, "%s\n", kv[i]);
  }
  return write_file_atomic(path, out, len, durable);
}
