/* The resolver of descriptor paths (beneath.c): names stay inside the disk
 * directory whatever symlinks say, only regular files open, a FIFO fails at
 * once, and the fallback without openat2 is stricter, never looser. */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "helpers.h"
#include "internal.h"

TestSuite(beneath, .init = tmpdir_setup, .fini = tmpdir_teardown, .timeout = 10);

static const char *disk_dir(void)
{
  return tpath("disk");
}

/* DISK/ with a file inside, and OUTSIDE/victim next to it. */
static void layout(void)
{
  cr_assert_eq(mkdir(tpath("disk"), 0755), 0);
  cr_assert_eq(mkdir(tpath("outside"), 0755), 0);
  FILE *f = fopen(tpath("disk/in.hds"), "w");
  fputs("inside", f);
  fclose(f);
  f = fopen(tpath("outside/victim"), "w");
  fputs("victim", f);
  fclose(f);
}

static void expect_refused(const char *path, int flags, int err, const char *words)
{
  int fd = ploop_open_file(disk_dir(), path, flags, 0600);
  if (fd >= 0)
    close(fd);
  cr_assert_lt(fd, 0, "%s opened", path);
  cr_assert_eq(ploop_get_errno(), err, "%s: errno %d, want %d (%s)", path, ploop_get_errno(), err,
               ploop_get_error());
  cr_assert(strstr(ploop_get_error(), words), "message '%s' lacks '%s'", ploop_get_error(), words);
}

static void expect_victim_intact(void)
{
  char buf[16] = {0};
  int fd = open(tpath("outside/victim"), O_RDONLY);
  cr_assert_geq(fd, 0);
  cr_assert_eq(read(fd, buf, sizeof buf), 6);
  close(fd);
  cr_assert_str_eq(buf, "victim");
}

Test(beneath, plain_file_and_inside_symlink_open)
{
  layout();
  cr_assert_eq(symlink("in.hds", tpath("disk/link.hds")), 0);
  cr_assert_eq(mkdir(tpath("disk/sub"), 0755), 0);
  cr_assert_eq(symlink("../in.hds", tpath("disk/sub/up.hds")), 0);
  const char *ok[] = {"disk/in.hds", "disk/link.hds", "disk/sub/up.hds"};
  for (size_t i = 0; i < 3; i++) {
    int fd = ploop_open_file(disk_dir(), tpath("%s", ok[i]), O_RDWR, 0);
    cr_assert_geq(fd, 0, "%s: %s", ok[i], ploop_get_error());
    cr_assert_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "O_NONBLOCK left set");
    char buf[8] = {0};
    cr_assert_eq(read(fd, buf, 6), 6);
    cr_assert_str_eq(buf, "inside");
    close(fd);
    cr_assert_eq(ploop_check_file_beneath(disk_dir(), tpath("%s", ok[i])), 0);
  }
}

Test(beneath, symlinks_leaving_the_directory_are_refused)
{
  layout();
  cr_assert_eq(symlink(tpath("outside/victim"), tpath("disk/abs.hds")), 0);
  cr_assert_eq(symlink("../outside/victim", tpath("disk/rel.hds")), 0);
  cr_assert_eq(symlink(tpath("outside"), tpath("disk/sub")), 0);
  cr_assert_eq(symlink("/proc/self/fd/0", tpath("disk/magic.hds")), 0);
  const char *bad[] = {"disk/abs.hds", "disk/rel.hds", "disk/sub/victim", "disk/magic.hds"};
  for (size_t i = 0; i < 4; i++) {
    expect_refused(tpath("%s", bad[i]), O_RDWR, EXDEV, "outside the disk directory");
    cr_assert_lt(ploop_check_file_beneath(disk_dir(), tpath("%s", bad[i])), 0, "%s passed the check", bad[i]);
  }
  /* Creating through a dangling link or a linked directory makes nothing outside. */
  cr_assert_eq(symlink(tpath("outside/new"), tpath("disk/dangling.hds")), 0);
  expect_refused(tpath("disk/dangling.hds"), O_RDWR | O_CREAT | O_EXCL, EEXIST, "File exists");
  expect_refused(tpath("disk/sub/new"), O_RDWR | O_CREAT | O_EXCL, EXDEV, "outside");
  cr_assert_neq(access(tpath("outside/new"), F_OK), 0, "a file was created outside");
  expect_victim_intact();
}

Test(beneath, a_path_not_under_the_directory_is_refused)
{
  layout();
  expect_refused(tpath("outside/victim"), O_RDONLY, EXDEV, "not inside the disk directory");
  expect_refused(tpath("diskx/in.hds"), O_RDONLY, EXDEV, "not inside");
}

Test(beneath, fifo_socket_and_device_fail_at_once)
{
  layout();
  cr_assert_eq(mkfifo(tpath("disk/fifo.hds"), 0600), 0);
  /* Read-only and write-only opens of a FIFO block without a peer; the
   * suite's timeout fails the test if they do. */
  expect_refused(tpath("disk/fifo.hds"), O_RDONLY, EINVAL, "is a FIFO");
  expect_refused(tpath("disk/fifo.hds"), O_WRONLY, EINVAL, "is a FIFO");
  cr_assert_lt(ploop_check_file_beneath(disk_dir(), tpath("disk/fifo.hds")), 0);
  cr_assert_eq(symlink("/dev/null", tpath("disk/null.hds")), 0);
  expect_refused(tpath("disk/null.hds"), O_RDWR, EXDEV, "outside");
  cr_assert_eq(mkdir(tpath("disk/dir.hds"), 0755), 0);
  expect_refused(tpath("disk/dir.hds"), O_RDONLY, EINVAL, "is a directory");
  /* A bare path is the caller's own choice, but still a regular file only. */
  int fd = ploop_open_file(NULL, tpath("disk/fifo.hds"), O_RDONLY, 0);
  cr_assert_lt(fd, 0);
  cr_assert(strstr(ploop_get_error(), "is a FIFO"), "%s", ploop_get_error());
  fd = ploop_open_file(NULL, "/dev/null", O_RDWR, 0);
  cr_assert_lt(fd, 0);
  cr_assert(strstr(ploop_get_error(), "character device"), "%s", ploop_get_error());
}

Test(beneath, missing_file_is_not_found_and_passes_the_check)
{
  layout();
  expect_refused(tpath("disk/none.hds"), O_RDONLY, ENOENT, "No such file");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_NOTFOUND);
  cr_assert_eq(ploop_check_file_beneath(disk_dir(), tpath("disk/none.hds")), 0);
}

Test(beneath, unlink_and_link_stay_inside)
{
  layout();
  cr_assert_eq(symlink(tpath("outside"), tpath("disk/sub")), 0);
  cr_assert_lt(ploop_unlink_file(disk_dir(), tpath("disk/sub/victim")), 0);
  cr_assert_eq(errno, EXDEV);
  cr_assert_lt(ploop_link_file(disk_dir(), tpath("disk/in.hds"), tpath("disk/sub/copy")), 0);
  cr_assert_lt(ploop_link_file(disk_dir(), tpath("disk/sub/victim"), tpath("disk/stolen")), 0);
  cr_assert_neq(access(tpath("outside/copy"), F_OK), 0);
  cr_assert_neq(access(tpath("disk/stolen"), F_OK), 0);
  expect_victim_intact();
  /* Inside: a second name, then both names go. */
  cr_assert_eq(ploop_link_file(disk_dir(), tpath("disk/in.hds"), tpath("disk/in2.hds")), 0);
  cr_assert_eq(ploop_unlink_file(disk_dir(), tpath("disk/in.hds")), 0);
  cr_assert_eq(access(tpath("disk/in2.hds"), F_OK), 0);
  /* A symlink itself is removed, never its target. */
  cr_assert_eq(symlink(tpath("outside/victim"), tpath("disk/abs.hds")), 0);
  cr_assert_eq(ploop_unlink_file(disk_dir(), tpath("disk/abs.hds")), 0);
  expect_victim_intact();
}

Test(beneath, delta_open_refuses_a_linked_delta_that_a_bare_open_accepts)
{
  layout();
  struct ploop_delta_create_params p = {.size_bytes = 16 << 20};
  OK(ploop_delta_create(tpath("outside/top.hds"), &p));
  cr_assert_eq(symlink(tpath("outside/top.hds"), tpath("disk/top.hds")), 0);
  cr_assert_null(delta_open(disk_dir(), tpath("disk/top.hds"), PLOOP_OPEN_RDWR));
  cr_assert(strstr(ploop_get_error(), "outside the disk directory"), "%s", ploop_get_error());
  cr_assert_null(delta_open_raw(disk_dir(), tpath("disk/top.hds"), 2048, true));
  struct ploop_delta *d = NOTNULL(delta_open(NULL, tpath("disk/top.hds"), PLOOP_OPEN_RDONLY));
  delta_close(d, false);
  cr_assert_lt(delta_create_file(disk_dir(), tpath("disk/top.hds"), &p, false), 0);
}

/* Hides openat2 (ENOSYS, as on a kernel before 5.6 or under a seccomp
 * filter): the fallback walk then follows no symlink at all. */
static void hide_openat2(void)
{
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
  cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0, "seccomp: %s", strerror(errno));
}

Test(beneath, without_openat2_no_symlink_is_followed)
{
  layout();
  cr_assert_eq(mkdir(tpath("disk/real"), 0755), 0);
  FILE *f = fopen(tpath("disk/real/x.hds"), "w");
  fclose(f);
  cr_assert_eq(symlink(tpath("outside"), tpath("disk/sub")), 0);
  cr_assert_eq(symlink("../outside/victim", tpath("disk/rel.hds")), 0);
  hide_openat2();
  int fd = ploop_open_file(disk_dir(), tpath("disk/real/x.hds"), O_RDWR, 0);
  cr_assert_geq(fd, 0, "%s", ploop_get_error());
  close(fd);
  fd = ploop_open_file(disk_dir(), tpath("disk/in.hds"), O_RDONLY, 0);
  cr_assert_geq(fd, 0, "%s", ploop_get_error());
  close(fd);
  expect_refused(tpath("disk/sub/victim"), O_RDWR, ELOOP, "symlink");
  expect_refused(tpath("disk/rel.hds"), O_RDWR, ELOOP, "symlink");
  cr_assert_lt(ploop_unlink_file(disk_dir(), tpath("disk/sub/victim")), 0);
  expect_victim_intact();
}
