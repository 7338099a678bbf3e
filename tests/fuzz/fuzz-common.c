/* Temporary directories and fd-leak checks for the fuzz harnesses. */
#include "fuzz-common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *tmp_base(void) {
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

/* A run killed from outside (libFuzzer's timeout or OOM, fork mode's end,
 * ^C) cannot clean up: the next process removes the directories of every
 * harness process that no longer exists. Names carry the pid for that. */
static void sweep_dead(void) {
  DIR *d = opendir(tmp_base());
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    int pid;
    char path[PATH_MAX];
    if (sscanf(e->d_name, "ploop-fuzz-%d-", &pid) != 1 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    snprintf(path, sizeof path, "%s/%s", tmp_base(), e->d_name);
    fuzz_rmtree(path);
  }
  closedir(d);
}

void fuzz_tmpdir(char *out) {
  static bool swept;
  if (!swept) {
    swept = true;
    sweep_dead();
  }
  snprintf(out, PATH_MAX, "%s/ploop-fuzz-%d-XXXXXX", tmp_base(), (int)getpid());
  if (!mkdtemp(out)) {
    perror("fuzz: mkdtemp");
    abort();
  }
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  /* A run may leave a directory without write or search permission. */
  if (type == FTW_DP || type == FTW_D || type == FTW_DNR) chmod(path, 0700);
  if (remove(path) < 0 && errno != ENOENT) fprintf(stderr, "fuzz: remove %s: %s\n", path, strerror(errno));
  return 0;
}

static int chmod_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  if (type == FTW_D || type == FTW_DNR) chmod(path, 0700);
  return 0;
}

void fuzz_rmtree(const char *dir) {
  nftw(dir, chmod_one, 16, FTW_PHYS);
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  if (access(dir, F_OK) == 0) {
    fprintf(stderr, "fuzz: %s left behind\n", dir);
    abort();
  }
}

void fuzz_write_file(const char *path, const uint8_t *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    perror("fuzz: create input file");
    abort();
  }
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      perror("fuzz: write input file");
      abort();
    }
    done += (size_t)n;
  }
  close(fd);
}

int fuzz_count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

void fuzz_check_fds(int before, const char *what) {
  int after = fuzz_count_fds();
  if (before >= 0 && after > before) {
    fprintf(stderr, "fuzz: %s leaked %d fd(s)\n", what, after - before);
    abort();
  }
}
