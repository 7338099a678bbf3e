/* libFuzzer harness: tarball extraction into a container root (fill_tar of
 * ploop-container). The input is DIR/in.tar (plain or gzip); it is
 * extracted into DIR/root. Nothing may appear in DIR beside those two, and
 * the input must be untouched: a member written outside the root is a
 * finding. Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, header
 * checksums are not checked. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fill.h"
#include "fuzz-common.h"

static void check_outside(const char *dir, const char *tarball, size_t size) {
  DIR *d = opendir(dir);
  if (!d) abort();
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "in.tar") ||
        !strcmp(e->d_name, "root"))
      continue;
    fprintf(stderr, "fuzz: extraction wrote '%s' outside the root\n", e->d_name);
    abort();
  }
  closedir(d);
  struct stat st;
  if (lstat(tarball, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != size) {
    fprintf(stderr, "fuzz: extraction changed the tarball beside the root\n");
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fds = fuzz_count_fds();
  char dir[PATH_MAX], tarball[PATH_MAX], root[PATH_MAX];
  fuzz_tmpdir(dir);
  snprintf(tarball, sizeof tarball, "%s/in.tar", dir);
  snprintf(root, sizeof root, "%s/root", dir);
  fuzz_write_file(tarball, data, size);
  if (mkdir(root, 0755) < 0) abort();
  fill_tar(root, tarball);
  check_outside(dir, tarball, size);
  fuzz_rmtree(dir);
  fuzz_check_fds(fds, "tar run");
  return 0;
}
