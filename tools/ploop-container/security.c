/* Capabilities and the seccomp filter (see security.h). The filter follows
 * Docker's default profile where it matters for a host: no keyrings (not
 * namespaced), no kexec/modules/reboot/swap, no bpf or perf_event_open, no
 * open_by_handle_at (the "shocker" escape), no mount API, no clock or
 * accounting changes, no new user namespaces unless the container runs in
 * one (--userns). Denied calls fail with EPERM; clone3, whose flags a
 * filter cannot read, fails with ENOSYS so libc falls back to clone (runc). */
#include "security.h"

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "error.h"
#include "util.h"

static const char *const cap_names[] = {
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
};
#define NCAPS (int)(sizeof cap_names / sizeof cap_names[0])

/* Docker's default set minus MKNOD (no device cgroup; the rootfs is nodev
 * as well, so an added MKNOD still opens nothing). */
static const int default_caps[] = {
    CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FOWNER,     CAP_FSETID,     CAP_KILL,
    CAP_SETGID, CAP_SETUID,       CAP_SETPCAP,    CAP_NET_BIND_SERVICE,
    CAP_NET_RAW, CAP_SYS_CHROOT,  CAP_AUDIT_WRITE, CAP_SETFCAP,
};

/* "NET_ADMIN", "cap_net_admin" or "ALL". */
static int cap_parse(const char *what, const char *s, uint64_t *mask)
{
  const char *n = strncasecmp(s, "CAP_", 4) == 0 ? s + 4 : s;
  if (strcasecmp(n, "ALL") == 0) {
    *mask |= (NCAPS == 64 ? ~0ull : (1ull << NCAPS) - 1);
    return 0;
  }
  for (int i = 0; i < NCAPS; i++)
    if (strcasecmp(n, cap_names[i]) == 0) {
      *mask |= 1ull << i;
      return 0;
    }
  return ct_usage("%s: unknown capability '%s' (like NET_ADMIN or ALL)", what, s);
}

int ct_sec_opt(int opt, const char *arg, struct ct_sec *s)
{
  switch (opt) {
  case 0x120:
    return cap_parse("--cap-add", arg, &s->cap_add) < 0 ? -1 : 1;
  case 0x121:
    return cap_parse("--cap-drop", arg, &s->cap_drop) < 0 ? -1 : 1;
  case 0x122:
    if (strcmp(arg, "unconfined") == 0)
      s->unconfined = true;
    else if (strcmp(arg, "default") == 0)
      s->unconfined = false;
    else
      return ct_usage("--seccomp: '%s' is not default or unconfined", arg);
    return 1;
  case 0x123:
    s->readonly = true;
    return 1;
  }
  return 0;
}

uint64_t ct_sec_caps(const struct ct_sec *s)
{
  uint64_t keep = 0;
  for (size_t i = 0; i < sizeof default_caps / sizeof default_caps[0]; i++)
    keep |= 1ull << default_caps[i];
  return (keep | s->cap_add) & ~s->cap_drop;
}

void ct_sec_kv(const struct ct_sec *s, char *kv[CT_SEC_KV])
{
  kv[0] = xasprintf("cap_add=%#" PRIx64, s->cap_add);
  kv[1] = xasprintf("cap_drop=%#" PRIx64, s->cap_drop);
  kv[2] = xasprintf("seccomp=%s", s->unconfined ? "unconfined" : "default");
  kv[3] = xasprintf("read_only=%d", s->readonly);
}

int ct_sec_set_key(struct ct_sec *s, const char *key, const char *v)
{
  if (!strcmp(key, "cap_add") || !strcmp(key, "cap_drop")) {
    char *end;
    errno = 0;
    unsigned long long m = strtoull(v, &end, 0);
    if (errno || end == v || *end || v[0] == '-' || (NCAPS < 64 && m >> NCAPS))
      return ct_usage("%s: '%s' is not a capability mask", key, v);
    *(!strcmp(key, "cap_add") ? &s->cap_add : &s->cap_drop) = m;
    return 1;
  }
  if (!strcmp(key, "seccomp"))
    return ct_sec_opt(0x122, v, s);
  if (!strcmp(key, "read_only")) {
    if (strcmp(v, "0") && strcmp(v, "1"))
      return ct_usage("read_only: '%s' is not 0 or 1", v);
    s->readonly = v[0] == '1';
    return 1;
  }
  return 0;
}

int ct_sec_save(const char *name, const char *file, const struct ct_sec *s)
{
  char *kv[CT_SEC_KV];
  ct_sec_kv(s, kv);
  int rc = ct_kv_set(name, file, (const char *const *)kv, CT_SEC_KV, false);
  for (int i = 0; i < CT_SEC_KV; i++)
    free(kv[i]);
  return rc;
}

int ct_sec_load(const char *name, const char *file, struct ct_sec *s)
{
  char v[64];
  memset(s, 0, sizeof *s);
  if (ct_kv_get(name, file, "cap_add", v, sizeof v) < 0)
    return -1;
  s->cap_add = strtoull(v, NULL, 0);
  if (ct_kv_get(name, file, "cap_drop", v, sizeof v) > 0)
    s->cap_drop = strtoull(v, NULL, 0);
  s->unconfined = ct_kv_get(name, file, "seccomp", v, sizeof v) > 0 && strcmp(v, "unconfined") == 0;
  s->readonly = ct_kv_get(name, file, "read_only", v, sizeof v) > 0 && strcmp(v, "1") == 0;
  if (ct_kv_get(name, file, "userns", v, sizeof v) > 0)
    s->userns = strcmp(v, "1") == 0;
  return 0;
}

/* Denied with EPERM (names libseccomp does not know on this arch are skipped). */
static const char *const denied[] = {
    "keyctl", "add_key", "request_key",                     /* keyrings are not namespaced */
    "kexec_load", "kexec_file_load", "reboot",
    "init_module", "finit_module", "delete_module", "create_module",
    "bpf", "perf_event_open", "userfaultfd", "lookup_dcookie",
    "open_by_handle_at",                                    /* escapes a bind/chroot by handle */
    "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
    "settimeofday", "clock_settime", "clock_adjtime", "stime",
    "iopl", "ioperm", "syslog", "uselib", "nfsservctl", "_sysctl", "sysfs", "ustat",
    "mount", "umount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    "setns", "vm86", "vm86old", "get_kernel_syms", "query_module",
};

static int load_filter(const struct ct_sec *s)
{
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx)
    return ct_fail(0, "seccomp_init failed");
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof denied / sizeof denied[0]; i++) {
    int nr = seccomp_syscall_resolve_name(denied[i]);
    if (nr == __NR_SCMP_ERROR)
      continue;
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    if (rc < 0)
      ct_fail(-rc, "seccomp rule for %s", denied[i]);
  }
  if (rc == 0 && !s->userns) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
    /* clone's flags are its first argument on x86, arm, ... (second on s390). */
    if (rc == 0)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                            SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
    if (rc < 0)
      ct_fail(-rc, "seccomp rule for user namespaces");
  }
  if (rc == 0) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (rc < 0)
      ct_fail(-rc, "seccomp rule for clone3");
  }
  if (rc == 0 && (rc = seccomp_load(ctx)) < 0)
    ct_fail(-rc, "load the seccomp filter");
  seccomp_release(ctx);
  return rc < 0 ? -1 : 0;
}

int ct_drop_privileges(const struct ct_sec *s)
{
  uint64_t keep = ct_sec_caps(s);
  for (int cap = 0; cap < 64; cap++) {
    if (keep & (1ull << cap))
      continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
      if (errno == EINVAL)  /* past the kernel's last capability */
        break;
      return ct_fail(errno, "drop capability %d from the bounding set", cap);
    }
  }
  if (s->user_set) {
    if (setgroups(0, NULL) < 0 || setresgid(s->gid, s->gid, s->gid) < 0)
      return ct_fail(errno, "--user: become gid %u", s->gid);
    if (setresuid(s->uid, s->uid, s->uid) < 0)
      return ct_fail(errno, "--user: become uid %u", s->uid);
    if (s->uid != 0)  /* as Docker: a non-root user gets no capabilities (the kernel cleared them) */
      keep = 0;
  }
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  for (int i = 0; i < 2; i++) {
    uint32_t w = (uint32_t)(keep >> (32 * i));
    data[i].effective = data[i].permitted = w;
    data[i].inheritable = 0;  /* CVE-2022-24769: nothing passes through execve by inheritance */
  }
  if (syscall(SYS_capset, &hdr, data) < 0)
    return ct_fail(errno, "capset");
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
    return ct_fail(errno, "clear ambient capabilities");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return ct_fail(errno, "set no_new_privs");
  return s->unconfined ? 0 : load_filter(s);
}
