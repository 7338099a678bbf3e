/* Unit tests for ploop_disk_release / ploop_disk_acquire and the standby
 * open (disk-handover.c), on local files: released, every I/O fails and
 * another opener may write; acquired again, the stack is reread from the
 * store, so what the other one wrote is seen. */
#include <errno.h>

#include "helpers.h"

#define CL 32768u
#define DISK_SIZE (8u << 20)

TestSuite(disk_handover, .init = tmpdir_setup, .fini = tmpdir_teardown);

static void *xaligned(size_t len)
{
  void *p = NULL;
  cr_assert_eq(posix_memalign(&p, 4096, len), 0);
  return p;
}

static void put(struct ploop_disk *disk, uint8_t v, uint64_t off)
{
  uint8_t *b = xaligned(4096);
  memset(b, v, 4096);
  OK(ploop_disk_pwrite(disk, b, 4096, off, 0));
  free(b);
}

static uint8_t get(struct ploop_disk *disk, uint64_t off)
{
  uint8_t *b = xaligned(4096);
  OK(ploop_disk_pread(disk, b, 4096, off));
  uint8_t v = b[100];
  free(b);
  return v;
}

Test(disk_handover, release_lets_another_writer_in_and_acquire_sees_its_writes)
{
  make_disk(DISK_SIZE, CL / 512);
  struct ploop_disk *a = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  put(a, 0x11, 0);
  cr_assert_null(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR), "a second writer while held");
  OK(ploop_disk_release(a));
  cr_assert(ploop_disk_released(a));
  uint8_t *b = xaligned(4096);
  cr_assert_eq(ploop_disk_pread(a, b, 4096, 0), -1);
  cr_assert_eq(ploop_get_errno(), ESHUTDOWN);
  cr_assert_eq(ploop_disk_pwrite(a, b, 4096, 0, 0), -1);
  cr_assert_eq(ploop_disk_flush(a), -1);
  cr_assert_eq(ploop_disk_block_status(a, 0, 4096, &(struct ploop_extent){0}, 1), -1);
  free(b);
  cr_assert_eq(ploop_disk_size(a), DISK_SIZE, "the size stays for the device above");
  /* The other host: opens cleanly (no in-use mark left), writes a new cluster. */
  struct ploop_disk *o = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  cr_assert_eq(get(o, 0), 0x11);
  put(o, 0x22, 5 * CL);
  cr_assert_eq(ploop_disk_acquire(a, 0), -1, "acquire while the other holds it");
  cr_assert(ploop_disk_released(a));
  OK(ploop_disk_close(o));
  OK(ploop_disk_acquire(a, 0));
  cr_assert_not(ploop_disk_released(a));
  cr_assert_eq(get(a, 5 * CL), 0x22, "the other writer's cluster is seen after acquire");
  put(a, 0x33, 6 * CL);
  OK(ploop_disk_release(a));
  OK(ploop_disk_release(a)); /* twice is no error */
  OK(ploop_disk_close(a));
  struct ploop_disk *c = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDONLY));
  cr_assert_eq(get(c, 6 * CL), 0x33);
  OK(ploop_disk_close(c));
}

Test(disk_handover, standby_open_takes_nothing_until_acquired)
{
  make_disk(DISK_SIZE, CL / 512);
  struct ploop_disk *holder = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR));
  struct ploop_disk *s = NOTNULL(ploop_disk_open(test_dir, NULL, PLOOP_OPEN_RDWR | PLOOP_OPEN_STANDBY));
  cr_assert(ploop_disk_released(s));
  cr_assert_eq(ploop_disk_size(s), DISK_SIZE);
  cr_assert_eq(ploop_disk_acquire(s, 0), -1);
  put(holder, 0x44, CL);
  OK(ploop_disk_close(holder));
  OK(ploop_disk_acquire(s, 0));
  cr_assert_eq(get(s, CL), 0x44);
  OK(ploop_disk_close(s));
  cr_assert_null(ploop_disk_open(test_dir, "{00000000-0000-0000-0000-000000000001}",
                                 PLOOP_OPEN_RDWR | PLOOP_OPEN_STANDBY));
}
