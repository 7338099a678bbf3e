/* A minimal busybox root filesystem: the static binary, one symlink per
 * applet, /etc/passwd, /etc/group, an inittab; no network configuration. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "error.h"
#include "fill.h"
#include "util.h"

#define BUSYBOX "/bin/busybox"

/* A dynamic busybox would fail inside with a baffling "not found". */
static int check_static(const char *path)
{
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ct_fail(errno, "%s (install busybox-static)", path);
  Elf64_Ehdr eh;
  if (pread(fd, &eh, sizeof eh, 0) != sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64)
    return ct_fail(0, "%s is not a 64-bit ELF binary", path);
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize)) != sizeof ph)
      return ct_fail(0, "%s: truncated ELF", path);
    if (ph.p_type == PT_INTERP)
      return ct_fail(0, "%s is dynamically linked; install busybox-static", path);
  }
  return 0;
}

static int copy_file(const char *src, const char *dst, mode_t mode)
{
  cleanup_close int in = open(src, O_RDONLY | O_CLOEXEC);
  cleanup_close int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (in < 0 || out < 0)
    return ct_fail(errno, "copy %s to %s", src, dst);
  struct stat st;
  if (fstat(in, &st) < 0)
    return ct_fail(errno, "stat %s", src);
  /* Plain read/write: copy_file_range refuses to cross filesystems. */
  char buf[65536];
  ssize_t n;
  while ((n = read(in, buf, sizeof buf)) > 0)
    if (write(out, buf, (size_t)n) != n)
      return ct_fail(errno, "write %s", dst);
  if (n < 0)
    return ct_fail(errno, "read %s", src);
  return fchmod(out, mode) < 0 ? ct_fail(errno, "chmod %s", dst) : 0;
}

static int put(const char *root, const char *path, const char *text, mode_t mode)
{
  cleanup_free char *p = xasprintf("%s/%s", root, path);
  cleanup_close int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return ct_fail(errno, "create %s", p);
  size_t len = strlen(text);
  if (write(fd, text, len) != (ssize_t)len)
    return ct_fail(errno, "write %s", p);
  return 0;
}

/* `busybox --list-full` prints "usr/bin/awk"-style paths, one per line. */
static int applet_list(char *buf, size_t len)
{
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0)
    return ct_fail(errno, "pipe");
  pid_t pid = fork();
  if (pid < 0)
    return ct_fail(errno, "fork");
  if (pid == 0) {
    dup2(pfd[1], 1);
    execl(BUSYBOX, "busybox", "--list-full", (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  size_t got = 0;
  ssize_t n;
  while (got + 1 < len && (n = read(pfd[0], buf + got, len - 1 - got)) > 0)
    got += (size_t)n;
  close(pfd[0]);
  buf[got] = 0;
  int st;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || got == 0)
    return ct_fail(0, "%s --list-full failed", BUSYBOX);
  return 0;
}

int fill_busybox(const char *root)
{
  static const char *dirs[] = {"bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root",
                               "home", "proc", "sys", "dev", "tmp", "var", "var/log", "run"};
  if (check_static(BUSYBOX) < 0)
    return -1;
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    cleanup_free char *d = xasprintf("%s/%s", root, dirs[i]);
    mode_t mode = strcmp(dirs[i], "tmp") == 0 ? 01777 : strcmp(dirs[i], "root") == 0 ? 0700 : 0755;
    if (mkdir(d, mode) < 0 && errno != EEXIST)
      return ct_fail(errno, "mkdir %s", d);
    chmod(d, mode);
  }
  cleanup_free char *bb = xasprintf("%s/bin/busybox", root);
  if (copy_file(BUSYBOX, bb, 0755) < 0)
    return -1;
  char list[32768];
  if (applet_list(list, sizeof list) < 0)
    return -1;
  char *save = NULL;
  for (char *a = strtok_r(list, "\n", &save); a; a = strtok_r(NULL, "\n", &save)) {
    if (strcmp(a, "bin/busybox") == 0 || strstr(a, ".."))
      continue;
    cleanup_free char *link = xasprintf("%s/%s", root, a);
    if (symlink("/bin/busybox", link) < 0 && errno != EEXIST)
      return ct_fail(errno, "symlink %s", link);
  }
  if (put(root, "etc/passwd",
          "root:x:0:0:root:/root:/bin/sh\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0644) < 0 ||
      put(root, "etc/group", "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n", 0644) < 0 ||
      put(root, "etc/shadow", "root:*:19000:0:99999:7:::\n", 0600) < 0 ||
      put(root, "etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n", 0644) < 0 ||
      put(root, "etc/profile", "export PS1='\\h:\\w\\$ '\n", 0644) < 0 ||
      put(root, "etc/fstab", "", 0644) < 0 ||
      /* For `run NAME -- /sbin/init`: busybox init reads this. */
      put(root, "etc/inittab",
          "::sysinit:/bin/mkdir -p /run /var/log\n"
          "::respawn:-/bin/sh\n"
          "::ctrlaltdel:/sbin/reboot\n"
          "::shutdown:/bin/sync\n", 0644) < 0)
    return -1;
  return 0;
}
