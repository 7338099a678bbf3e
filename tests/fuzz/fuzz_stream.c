/* libFuzzer harness: the send/receive stream decoder (ploop_receive,
 * formats/ploop-stream.md). The input is the stream, read from a memfd.
 * A full stream is received into DIR/disk (absent); for an incremental
 * one (by its header's flag), DIR/disk is first made as a small disk whose
 * newest snapshot is the stream's base, as the receiving side would hold.
 * What the API promises is checked: an accepted stream leaves a disk that
 * opens and reads; a refused full one leaves nothing in DIR, a refused
 * incremental one leaves the descriptor as it was. Built with
 * FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, the decoder skips its XXH3
 * checks so the fuzzer gets past them. */
#include <dirent.h>
#include <endian.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz-common.h"
#include "libploop.h"
#include "format.h"
#include "stream.h"

static size_t read_all(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(buf, 1, len, f);
  fclose(f);
  return n;
}

/* For an incremental stream: a disk of the header's size and cluster whose
 * newest snapshot is the base, with an empty top. False if the header's
 * geometry is not one worth making (the receive then refuses it anyway). */
static bool make_base(const char *disk_dir, const uint8_t *data, size_t size) {
  struct ploop_stream_header raw;
  if (size < sizeof raw) return false;
  memcpy(&raw, data, sizeof raw);
  uint64_t vb = le64toh(raw.virtual_bytes);
  uint32_t cb = le32toh(raw.cluster_bytes);
  if (!(le32toh(raw.flags) & PLOOP_STREAM_INCREMENTAL) || vb == 0 || vb % 512 || vb > (64u << 20) ||
      cb < 32768 || cb > (1u << 20) || (cb & (cb - 1)))
    return false;
  char path[PATH_MAX], base[39], out[PLOOP_UUID_LEN + 1];
  stream_guid_from_wire(raw.base_guid, base);
  snprintf(path, sizeof path, "%s/%s", disk_dir, PLOOP_DEFAULT_IMAGE_NAME);
  struct ploop_delta_create_params p = {.size_bytes = vb, .cluster_sectors = cb / 512};
  if (mkdir(disk_dir, 0755) < 0 || ploop_disk_create(path, &p) < 0) abort();
  if (ploop_snapshot_create(disk_dir, base, out) < 0) return true; /* a GUID it will not take */
  return true;
}

static bool dir_empty(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) abort();
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n == 0;
}

/* A header declaring a big disk costs seconds of legitimate BAT work per
 * run (a 2 TiB disk in 32 KiB clusters: a 256 MiB BAT) and teaches the
 * fuzzer nothing new; the 2^28-entry cap itself is unit-tested
 * (test_stream, test_delta). Such inputs are skipped; those past the cap
 * are not: the decoder must refuse them at once. */
static bool too_big(const uint8_t *data, size_t size) {
  struct ploop_stream_header raw;
  if (size < sizeof raw) return false;
  memcpy(&raw, data, sizeof raw);
  uint64_t cb = le32toh(raw.cluster_bytes);
  if (cb == 0) return false;
  uint64_t clusters = le64toh(raw.virtual_bytes) / cb;
  return clusters > (1u << 20) && clusters <= PLOOP_MAX_BAT_ENTRIES; /* past the cap: refused at once */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (too_big(data, size)) return -1; /* -1: libFuzzer keeps it out of the corpus */
  int fds = fuzz_count_fds();
  char dir[PATH_MAX], disk_dir[PATH_MAX];
  fuzz_tmpdir(dir);
  snprintf(disk_dir, sizeof disk_dir, "%s/disk", dir);

  int fd = memfd_create("stream", MFD_CLOEXEC);
  if (fd < 0 || write(fd, data, size) != (ssize_t)size || lseek(fd, 0, SEEK_SET) != 0) {
    perror("fuzz: memfd");
    abort();
  }
  bool incremental = make_base(disk_dir, data, size);
  static char before[65536], after[65536];
  char xml[PATH_MAX];
  snprintf(xml, sizeof xml, "%s/%s", disk_dir, PLOOP_DESCRIPTOR_NAME);
  size_t before_len = incremental ? read_all(xml, before, sizeof before) : 0;

  struct ploop_stream_stats st;
  char guid[PLOOP_UUID_LEN + 1];
  if (ploop_receive(disk_dir, NULL, fd, &st, guid) < 0) {
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "fuzz: receive: %s\n", ploop_get_error());
    if (!incremental && !dir_empty(dir)) {
      fprintf(stderr, "fuzz: a refused full stream left files behind (%s)\n", ploop_get_error());
      abort();
    }
    if (incremental && (read_all(xml, after, sizeof after) != before_len || memcmp(before, after, before_len))) {
      fprintf(stderr, "fuzz: a refused incremental stream changed the descriptor (%s)\n", ploop_get_error());
      abort();
    }
  } else {
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
