/* Disk streams (ploop_send / ploop_receive): round trips through a pipe,
 * full, incremental, per snapshot and compressed; several streams on one
 * fd; and every class of damaged stream refused with nothing left behind. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>

#define CL (64u << 10)
#define DISK_SIZE (4u << 20)
#include "stack.h"
#include "stream.h"

static void stream_setup(void)
{
  signal(SIGPIPE, SIG_IGN); /* a receiver that stops early makes the writer's pipe fail, not kill us */
  tmpdir_setup();
}

TestSuite(stream, .init = stream_setup, .fini = tmpdir_teardown, .timeout = 60);

struct blob {
  uint8_t *p;
  size_t len;
};

/* One stream of the disk in test_dir, in memory (a memfd read back). */
static struct blob send_mem(const struct ploop_send_opts *o, struct ploop_stream_stats *st)
{
  int fd = memfd_create("stream", 0);
  cr_assert(fd >= 0);
  OK(ploop_send(test_dir, o, fd, st));
  struct blob b = {.len = (size_t)lseek(fd, 0, SEEK_CUR)};
  b.p = malloc(b.len + 1);
  cr_assert(pread(fd, b.p, b.len, 0) == (ssize_t)b.len);
  close(fd);
  return b;
}

struct feeder {
  int fd;
  struct blob b;
};

static void *feed(void *arg)
{
  struct feeder *f = arg;
  size_t off = 0;
  while (off < f->b.len) {
    ssize_t w = write(f->fd, f->b.p + off, f->b.len - off);
    if (w <= 0)
      break; /* the receiver stopped reading */
    off += (size_t)w;
  }
  close(f->fd);
  return NULL;
}

/* Feeds B through a pipe to ploop_receive into DIR. */
static int recv_blob(const char *dir, struct blob b, char *guid)
{
  int p[2];
  cr_assert(pipe(p) == 0);
  struct feeder f = {.fd = p[1], .b = b};
  pthread_t t;
  cr_assert(pthread_create(&t, NULL, feed, &f) == 0);
  int rc = ploop_receive(dir, NULL, p[0], NULL, guid);
  close(p[0]);
  pthread_join(t, NULL);
  return rc;
}

static void assert_same_view(const char *dir_a, const char *guid_a, const char *dir_b, const char *guid_b)
{
  struct ploop_disk *a = NOTNULL(ploop_disk_open(dir_a, guid_a, PLOOP_OPEN_RDONLY));
  struct ploop_disk *b = NOTNULL(ploop_disk_open(dir_b, guid_b, PLOOP_OPEN_RDONLY));
  cr_assert_eq(ploop_disk_size(a), ploop_disk_size(b));
  uint8_t *x = read_all(a), *y = read_all(b);
  if (memcmp(x, y, ploop_disk_size(a)))
    assert_equal_model(x, y, ploop_disk_size(a), guid_a ? guid_a : "top");
  free(x);
  free(y);
  OK(ploop_disk_close(a));
  OK(ploop_disk_close(b));
}

/* Hidden ".NAME.receive-XXXXXX" directories of full receives in test_dir. */
static int staging_dirs(void)
{
  DIR *d = opendir(test_dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)))
    n += e->d_name[0] == '.' && strstr(e->d_name, ".receive-") != NULL;
  closedir(d);
  return n;
}

/* Names, sizes and bytes of every file in DIR, hashed: "unchanged" for a directory. */
static uint64_t dir_digest(const char *dir)
{
  struct dirent **ents;
  int n = scandir(dir, &ents, NULL, alphasort);
  cr_assert(n >= 0, "scandir %s", dir);
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
    struct stat sb;
    if (ents[i]->d_name[0] != '.' && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
      for (const char *c = ents[i]->d_name; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
      FILE *f = fopen(path, "r");
      int ch;
      while ((ch = fgetc(f)) != EOF)
        h = (h ^ (uint8_t)ch) * 1099511628211ull;
      fclose(f);
    }
    free(ents[i]);
  }
  free(ents);
  return h;
}

/* Data in clusters 0-9 and 40, a snapshot S1; S2 rewrites 3, zeroes 5 and
 * adds 20; S3 adds 60 and rewrites 40. */
static void make_chain(char s[4][PLOOP_UUID_LEN + 1])
{
  struct ploop_disk *d = new_disk();
  put(d, 1, 0, 10 * CL);
  put(d, 2, 40 * CL, CL);
  OK(ploop_disk_snapshot(d, NULL, s[1]));
  put(d, 3, 3 * CL, CL);
  OK(ploop_disk_write_zeroes(d, 5 * CL, CL, 0));
  put(d, 4, 20 * CL + 512, 1024); /* partial: copied up onto zeros */
  OK(ploop_disk_snapshot(d, NULL, s[2]));
  put(d, 5, 60 * CL, CL);
  put(d, 6, 40 * CL, CL);
  OK(ploop_disk_snapshot(d, NULL, s[3]));
  OK(ploop_disk_close(d));
}

Test(stream, full_round_trip_through_a_pipe)
{
  char s[4][PLOOP_UUID_LEN + 1], got[PLOOP_UUID_LEN + 1];
  make_chain(s);
  struct ploop_send_opts o = {.guid = s[2]};
  struct ploop_stream_stats st;
  struct blob b = send_mem(&o, &st);
  cr_assert_eq(st.bytes, b.len);
  cr_assert_eq(st.clusters, 11, "%llu data frames",
               (unsigned long long)st.clusters); /* 0-9 but 5, 20 and 40; 5 is zero: a hole */
  cr_assert_str_eq(st.guid, s[2]);
  OK(recv_blob(tpath("dst"), b, got));
  cr_assert_str_eq(got, s[2]);
  cr_assert_eq(staging_dirs(), 0);
  assert_same_view(test_dir, s[2], tpath("dst"), s[2]);
  assert_same_view(test_dir, s[2], tpath("dst"), NULL); /* the new top is empty */
  char msg[1024];
  cr_assert_eq(ploop_disk_check(tpath("dst"), PLOOP_CHECK_READONLY, msg, sizeof msg), 0, "%s", msg);
  free(b.p);
}

Test(stream, chain_of_incremental_sends_reproduces_every_snapshot)
{
  char s[4][PLOOP_UUID_LEN + 1], got[PLOOP_UUID_LEN + 1];
  make_chain(s);
  struct ploop_send_opts o = {.guid = s[1]};
  struct blob b = send_mem(&o, NULL);
  OK(recv_blob(tpath("dst"), b, got));
  free(b.p);
  for (int k = 2; k <= 3; k++) {
    o = (struct ploop_send_opts){.guid = s[k], .since = s[k - 1]};
    struct ploop_stream_stats st;
    b = send_mem(&o, &st);
    cr_assert_eq(st.clusters, 2, "snapshot %d: %llu data frames", k, (unsigned long long)st.clusters);
    OK(recv_blob(tpath("dst"), b, got));
    cr_assert_str_eq(got, s[k]);
    free(b.p);
    for (int j = 1; j <= k; j++)
      assert_same_view(test_dir, s[j], tpath("dst"), s[j]);
  }
  /* Cluster 5 was zeroed above S1, where it held data: zeros on the receiver too. */
  struct ploop_disk *d = NOTNULL(ploop_disk_open(tpath("dst"), s[2], PLOOP_OPEN_RDONLY));
  uint8_t *all = read_all(d);
  cr_assert_eq(first_nonzero(all + 5 * CL, CL), -1);
  free(all);
  OK(ploop_disk_close(d));
}

Test(stream, snapshots_flag_recreates_the_chain_with_its_guids)
{
  char s[4][PLOOP_UUID_LEN + 1], got[PLOOP_UUID_LEN + 1];
  make_chain(s);
  struct ploop_send_opts o = {.guid = s[3], .snapshots = true};
  struct blob b = send_mem(&o, NULL);
  OK(recv_blob(tpath("dst"), b, got));
  free(b.p);
  for (int k = 1; k <= 3; k++)
    assert_same_view(test_dir, s[k], tpath("dst"), s[k]);
  struct ploop_descriptor *dd = NOTNULL(ploop_descriptor_load(tpath("dst")));
  cr_assert_eq(dd->n_images, 4);
  ploop_descriptor_free(dd);
}

Test(stream, compressed_stream_is_smaller_and_equal)
{
  char s[4][PLOOP_UUID_LEN + 1], got[PLOOP_UUID_LEN + 1];
  struct ploop_disk *d = new_disk();
  uint8_t *text = malloc(8 * CL);
  for (size_t i = 0; i < 8 * CL; i++)
    text[i] = "ploop stream "[i % 13];
  OK(ploop_disk_pwrite(d, text, 8 * CL, 0, 0));
  put(d, 7, 30 * CL, CL); /* random-looking: stored as is */
  OK(ploop_disk_snapshot(d, NULL, s[1]));
  OK(ploop_disk_close(d));
  struct ploop_send_opts o = {.guid = s[1], .compress = true};
  struct ploop_stream_stats st;
  struct blob b = send_mem(&o, &st);
  cr_assert_eq(st.data_bytes, 9 * CL);
  cr_assert_lt(st.bytes, 2 * CL, "compressed stream is %llu bytes", (unsigned long long)st.bytes);
  OK(recv_blob(tpath("dst"), b, got));
  assert_same_view(test_dir, s[1], tpath("dst"), s[1]);
  free(b.p);
  free(text);
}

Test(stream, receive_stops_at_the_end_frame)
{
  char s[4][PLOOP_UUID_LEN + 1], got[PLOOP_UUID_LEN + 1];
  make_chain(s);
  struct ploop_send_opts o1 = {.guid = s[1]}, o2 = {.guid = s[2], .since = s[1]};
  int fd = memfd_create("two", 0);
  OK(ploop_send(test_dir, &o1, fd, NULL));
  OK(ploop_send(test_dir, &o2, fd, NULL));
  cr_assert(write(fd, "NEXT", 4) == 4);
  lseek(fd, 0, SEEK_SET);
  OK(ploop_receive(tpath("dst"), NULL, fd, NULL, got));
  cr_assert_str_eq(got, s[1]);
  OK(ploop_receive(tpath("dst"), NULL, fd, NULL, got));
  cr_assert_str_eq(got, s[2]);
  char rest[8] = "";
  cr_assert_eq(read(fd, rest, sizeof rest), 4);
  cr_assert_str_eq(rest, "NEXT");
  close(fd);
  assert_same_view(test_dir, s[2], tpath("dst"), s[2]);
}

/* Every damaged copy of B is refused with a "stream:" error and leaves DIR as
 * DIGEST says (0: absent). */
static void expect_refused(const char *dir, struct blob b, uint64_t digest, const char *what)
{
  int rc = recv_blob(dir, b, NULL);
  cr_assert_eq(rc, -1, "%s: accepted", what);
  cr_assert(strstr(ploop_get_error(), "stream"), "%s: error: %s", what, ploop_get_error());
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_CORRUPT, "%s: status %d (%s)", what, ploop_get_status(),
               ploop_get_error());
  if (!digest) {
    cr_assert(!file_exists(dir), "%s: %s left behind", what, dir);
    cr_assert_eq(staging_dirs(), 0, "%s: a staging directory left behind", what);
  } else
    cr_assert_eq(dir_digest(dir), digest, "%s: %s changed", what, dir);
}

/* Byte positions of each class: header fields, the first frame header (each
 * field), its payload, the round's digest, the end frame; and truncations. */
static void damage_all(const char *dir, struct blob b, uint64_t digest)
{
  size_t fh = 96, pl = 96 + 48, round = b.len - 96, end = b.len - 48;
  size_t at[] = {0,          8,       12,      16,       24,      28,       40,          56,
                 66,         80,      90,      fh,       fh + 4,  fh + 6,   fh + 9,      fh + 17,
                 fh + 25,    fh + 29, fh + 33, fh + 44,  pl,      pl + 777, pl + CL - 1, round + 9,
                 round + 17, end + 4, end + 9, end + 17, end + 47};
  uint8_t *c = malloc(b.len);
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    memcpy(c, b.p, b.len);
    c[at[i]] ^= 0x10;
    char what[64];
    snprintf(what, sizeof what, "bit flipped at byte %zu", at[i]);
    expect_refused(dir, (struct blob){c, b.len}, digest, what);
  }
  size_t cut[] = {0, 1, 95, 96, 96 + 47, pl, pl + 100, end - 1, end, b.len - 1};
  for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "cut to %zu bytes", cut[i]);
    expect_refused(dir, (struct blob){b.p, cut[i]}, digest, what);
    cr_assert(cut[i] == 0 || strstr(ploop_get_error(), "truncated"), "%s: %s", what, ploop_get_error());
  }
  free(c);
}

Test(stream, damaged_full_stream_leaves_nothing, .timeout = 120)
{
  char s[4][PLOOP_UUID_LEN + 1];
  make_chain(s);
  struct ploop_send_opts o = {.guid = s[1], .compress = true};
  struct blob b = send_mem(&o, NULL);
  damage_all(tpath("dst"), b, 0);
  /* An existing empty directory stays, empty. */
  cr_assert(mkdir(tpath("empty"), 0755) == 0);
  b.p[200] ^= 1;
  cr_assert_eq(recv_blob(tpath("empty"), b, NULL), -1);
  cr_assert(file_exists(tpath("empty")));
  DIR *dh = opendir(tpath("empty"));
  int n = 0;
  while (readdir(dh))
    n++;
  closedir(dh);
  cr_assert_eq(n, 2, "files left in the empty directory");
  free(b.p);
}

Test(stream, damaged_incremental_stream_leaves_the_disk_unchanged, .timeout = 120)
{
  char s[4][PLOOP_UUID_LEN + 1], got[PLOOP_UUID_LEN + 1];
  make_chain(s);
  struct ploop_send_opts o = {.guid = s[1]};
  struct blob b = send_mem(&o, NULL);
  OK(recv_blob(tpath("dst"), b, got));
  free(b.p);
  uint64_t before = dir_digest(tpath("dst"));
  o = (struct ploop_send_opts){.guid = s[3], .since = s[1], .snapshots = true};
  b = send_mem(&o, NULL);
  damage_all(tpath("dst"), b, before);
  OK(recv_blob(tpath("dst"), b, got)); /* the good copy still applies */
  assert_same_view(test_dir, s[2], tpath("dst"), s[2]);
  assert_same_view(test_dir, s[3], tpath("dst"), s[3]);
  free(b.p);
}

Test(stream, incremental_refused_where_it_does_not_apply)
{
  char s[4][PLOOP_UUID_LEN + 1], got[PLOOP_UUID_LEN + 1];
  make_chain(s);
  struct ploop_send_opts full = {.guid = s[1]}, inc = {.guid = s[3], .since = s[2]};
  struct blob b = send_mem(&full, NULL), i = send_mem(&inc, NULL);
  cr_assert_eq(recv_blob(tpath("none"), i, NULL), -1);
  ERROR_NAMES("no disk here");
  cr_assert(!file_exists(tpath("none")));
  OK(recv_blob(tpath("dst"), b, got));
  uint64_t before = dir_digest(tpath("dst"));
  cr_assert_eq(recv_blob(tpath("dst"), i, NULL), -1); /* dst holds S1, the stream needs S2 */
  ERROR_NAMES(s[2]);
  cr_assert_eq(dir_digest(tpath("dst")), before);
  /* Written after the snapshot: the copy has changed since S1. */
  struct ploop_disk *d = NOTNULL(ploop_disk_open(tpath("dst"), NULL, PLOOP_OPEN_RDWR));
  put(d, 9, 0, 512);
  OK(ploop_disk_close(d));
  before = dir_digest(tpath("dst"));
  struct ploop_send_opts inc2 = {.guid = s[2], .since = s[1]};
  struct blob j = send_mem(&inc2, NULL);
  cr_assert_eq(recv_blob(tpath("dst"), j, NULL), -1);
  ERROR_NAMES("changed since snapshot");
  cr_assert_eq(dir_digest(tpath("dst")), before);
  /* A full stream into a directory that holds a disk. */
  cr_assert_eq(recv_blob(tpath("dst"), b, NULL), -1);
  ERROR_NAMES("not empty");
  free(b.p);
  free(i.p);
  free(j.p);
}

Test(stream, send_refuses_since_that_is_not_below)
{
  char s[4][PLOOP_UUID_LEN + 1];
  make_chain(s);
  int fd = memfd_create("x", 0);
  struct ploop_send_opts o = {.guid = s[1], .since = s[2]};
  cr_assert_eq(ploop_send(test_dir, &o, fd, NULL), -1);
  ERROR_NAMES("not below");
  o = (struct ploop_send_opts){.guid = s[2], .since = s[2]};
  cr_assert_eq(ploop_send(test_dir, &o, fd, NULL), -1);
  cr_assert_eq(lseek(fd, 0, SEEK_CUR), 0, "a refused send wrote bytes");
  close(fd);
}

Test(stream, a_stalled_socket_times_out_and_leaves_nothing)
{
  char s[4][PLOOP_UUID_LEN + 1];
  make_chain(s);
  struct ploop_send_opts o = {.guid = s[1]};
  struct blob b = send_mem(&o, NULL);
  int sv[2];
  cr_assert(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  struct timeval tv = {.tv_usec = 200000};
  cr_assert(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
  cr_assert(write(sv[1], b.p, 96 + 48 + 100) == 96 + 48 + 100); /* then the sender stalls */
  cr_assert_eq(ploop_receive(tpath("dst"), NULL, sv[0], NULL, NULL), -1);
  cr_assert_eq(ploop_get_errno(), ETIMEDOUT, "%s", ploop_get_error());
  cr_assert(!file_exists(tpath("dst")));
  close(sv[0]);
  close(sv[1]);
  free(b.p);
}

Test(stream, send_to_a_closed_socket_is_an_error_not_a_signal)
{
  char s[4][PLOOP_UUID_LEN + 1];
  make_chain(s);
  signal(SIGPIPE, SIG_DFL);
  int sv[2];
  cr_assert(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  close(sv[1]);
  struct ploop_send_opts o = {.guid = s[1]};
  cr_assert_eq(ploop_send(test_dir, &o, sv[0], NULL), -1);
  cr_assert_eq(ploop_get_errno(), EPIPE, "%s", ploop_get_error());
  close(sv[0]);
}

/* Found by tests/fuzz (fuzz_stream): a 96-byte header claiming 50 TiB in
 * 32 KiB clusters made the receiver allocate a 6.7 GB BAT. */
Test(stream, header_over_the_bat_limit_is_refused)
{
  struct stream_header h = {.version = PLOOP_STREAM_VERSION, .cluster_bytes = 32768};
  snprintf(h.guid, sizeof h.guid, "%s", "{11111111-2222-4333-8444-555555555555}");
  snprintf(h.base_guid, sizeof h.base_guid, "%s", PLOOP_NULL_GUID);
  struct ploop_stream_header raw;
  struct stream_header out;
  h.virtual_bytes = 8ull << 40; /* 2^28 clusters: the most a delta may have */
  stream_header_encode(&h, &raw);
  cr_assert_eq(stream_header_decode(&raw, &out), 0, "%s", ploop_get_error());
  h.virtual_bytes = 50ull << 40;
  stream_header_encode(&h, &raw);
  cr_assert_eq(stream_header_decode(&raw, &out), -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_CORRUPT);
  cr_assert(strstr(ploop_get_error(), "BAT limit"), "%s", ploop_get_error());
}

/* Feeds B through a pipe to ploop_receive_device into DEV. */
static int recv_blob_device(int dev, const char *base, struct blob b, char *guid)
{
  int p[2];
  cr_assert(pipe(p) == 0);
  struct feeder f = {.fd = p[1], .b = b};
  pthread_t t;
  cr_assert(pthread_create(&t, NULL, feed, &f) == 0);
  int rc = ploop_receive_device(dev, base, NULL, p[0], NULL, guid);
  close(p[0]);
  pthread_join(t, NULL);
  return rc;
}

/* A file holding VIEW's bytes (DISK_SIZE), as an attached disk would show them. */
static int device_of(const char *guid)
{
  uint64_t size;
  uint8_t *v = read_view(guid, &size);
  int fd = memfd_create("device", 0);
  cr_assert(fd >= 0 && pwrite(fd, v, size, 0) == (ssize_t)size);
  free(v);
  return fd;
}

static void assert_device_is(int dev, const char *guid)
{
  uint64_t size;
  uint8_t *want = read_view(guid, &size), *got = malloc(size);
  cr_assert(pread(dev, got, size, 0) == (ssize_t)size);
  if (memcmp(got, want, size))
    assert_equal_model(got, want, size, guid);
  free(want);
  free(got);
}

Test(stream, device_receive_writes_the_newest_state_in_place)
{
  char s[4][PLOOP_UUID_LEN + 1], got[PLOOP_UUID_LEN + 1];
  make_chain(s);
  int dev = device_of(s[1]);
  /* two layers (S2 zeroes cluster 5, S3 rewrites 40): the newest wins */
  struct ploop_send_opts o = {.guid = s[3], .since = s[1], .snapshots = true};
  struct blob b = send_mem(&o, NULL);
  OK(recv_blob_device(dev, s[1], b, got));
  cr_assert_str_eq(got, s[3]);
  assert_device_is(dev, s[3]);
  free(b.p);
  close(dev);
}

Test(stream, device_receive_refuses_another_base_or_a_full_stream)
{
  char s[4][PLOOP_UUID_LEN + 1];
  make_chain(s);
  int dev = device_of(s[1]);
  struct ploop_send_opts inc = {.guid = s[3], .since = s[2]}, full = {.guid = s[1]};
  struct blob b = send_mem(&inc, NULL);
  cr_assert_eq(recv_blob_device(dev, s[1], b, NULL), -1, "a stream on S2 applied to S1's state");
  cr_assert(strstr(ploop_get_error(), s[2]), "%s", ploop_get_error());
  free(b.p);
  b = send_mem(&full, NULL);
  cr_assert_eq(recv_blob_device(dev, NULL, b, NULL), -1, "a full stream applied to a device");
  free(b.p);
  assert_device_is(dev, s[1]);
  close(dev);
}

Test(stream, device_receive_refuses_a_damaged_stream)
{
  char s[4][PLOOP_UUID_LEN + 1];
  make_chain(s);
  int dev = device_of(s[1]);
  struct ploop_send_opts o = {.guid = s[2], .since = s[1]};
  struct blob b = send_mem(&o, NULL);
  b.p[b.len - 200] ^= 0x10; /* in the last data frame's payload or the frames after it */
  cr_assert_eq(recv_blob_device(dev, s[1], b, NULL), -1, "a damaged stream applied");
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_CORRUPT, "%s", ploop_get_error());
  free(b.p);
  close(dev);
}
