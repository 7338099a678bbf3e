/* libFuzzer harness: the send/receive stream decoder (ploop_receive,
 * formats/ploop-stream.md). The input is the stream, read from a memfd;
 * a full receive builds DIR/disk. A stream that is accepted must leave a
 * disk that opens and reads. Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION,
 * the decoder skips its XXH3 checks so the fuzzer gets past them. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz-common.h"
#include "libploop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fds = fuzz_count_fds();
  char dir[PATH_MAX], disk_dir[PATH_MAX];
  fuzz_tmpdir(dir);
  snprintf(disk_dir, sizeof disk_dir, "%s/disk", dir);

  int fd = memfd_create("stream", MFD_CLOEXEC);
  if (fd < 0 || write(fd, data, size) != (ssize_t)size || lseek(fd, 0, SEEK_SET) != 0) {
    perror("fuzz: memfd");
    abort();
  }
  struct ploop_stream_stats st;
  char guid[PLOOP_UUID_LEN + 1];
  if (ploop_receive(disk_dir, NULL, fd, &st, guid) == 0) {
    struct ploop_disk *disk = ploop_disk_open(disk_dir, NULL, PLOOP_OPEN_RDONLY);
    if (!disk) {
      fprintf(stderr, "fuzz: a received disk does not open: %s\n", ploop_get_error());
      abort();
    }
    static char buf[4096] __attribute__((aligned(4096)));
    uint64_t vs = ploop_disk_size(disk);
    if (ploop_disk_pread(disk, buf, vs < sizeof buf ? vs : sizeof buf, 0) < 0) {
      fprintf(stderr, "fuzz: a received disk does not read: %s\n", ploop_get_error());
      abort();
    }
    ploop_disk_close(disk);
  }
  close(fd);
  fuzz_rmtree(dir);
  fuzz_check_fds(fds, "receive run");
  return 0;
}
