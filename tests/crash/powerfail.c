/* Simulated power failure (see powerfail.h).
 *
 * Recording: when PLOOP_POWERFAIL_JOURNAL and PLOOP_POWERFAIL_DIR are set,
 * this file's definitions of pwrite64, fallocate64, ftruncate64, fdatasync,
 * fsync, io_submit and io_getevents take the place of libc's and libaio's for libploop
 * (linked statically into crash-writer).  For every change to a file under
 * the directory they append to the journal the bytes before and after, then
 * call the real function; a sync appends a sync mark.  The journal is plain
 * page-cache writes: a SIGKILL does not lose it.
 *
 * Replay: for each file, every change after its last sync mark is undone
 * (newest first, restoring the old bytes and size), then each 512-byte
 * sector of those changes is put back or not, oldest first.  A real disk
 * may persist any subset of unsynced sectors, in any order; that is what
 * breaks a format that writes an index before the data it points to is
 * durable, and what a SIGKILL alone never shows.
 *
 * Files are known by inode (st_dev, st_ino), not by name: merging up links
 * the merged delta under its base's name, and the old base's unsynced
 * writes must not be replayed into the file that took its name. At replay a
 * file is found again by inode in its directory; a file no longer linked
 * there has nothing to roll back.
 *
 * CRASH_CUT_AT=N (with the journal on) SIGKILLs the writer instead of making
 * its Nth change (write, zeroing or truncation) to a tracked file: with a
 * fixed seed, a failing step reproduces exactly.
 *
 * Not modelled: directory entries (create, rename, unlink survive as they
 * are), the descriptor (always replaced by an fsynced rename), and file
 * systems that persist data past a size change that did not persist. */
#include "powerfail.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

enum { REC_FILE = 1, REC_WRITE, REC_ZERO, REC_TRUNC, REC_SYNC };
#define REC_MAGIC 0x50574652u /* "PWFR" */
#define MAX_FILES 256

struct rec {
  uint32_t magic, type;
  uint32_t file, pad;
  uint64_t off, len;
  uint64_t old_size, new_size;
  /* WRITE: old[len] then new[len]; ZERO: old[len]; TRUNC (shrink): old tail
   * [new_size, old_size); FILE: the path (len bytes), st_dev in off and
   * st_ino in old_size. */
};

/* ---- recording ---- */

static pthread_mutex_t jlock = PTHREAD_MUTEX_INITIALIZER;
static int jfd = -2; /* -2: not yet initialised; -1: disabled */
static char jdir[PATH_MAX];
static size_t jdir_len;
static struct {
  dev_t dev;
  ino_t ino;
  int rfd; /* read-only fd on the same inode, for the old bytes */
} files[MAX_FILES];
static unsigned n_files;
static uint64_t n_changes, cut_at; /* CRASH_CUT_AT; 0: off */

static uint64_t jbytes;
#define JOURNAL_MAX (1ull << 30) /* a test writer is killed long before this */

static void jwrite(const void *p, size_t n)
{
  const char *c = p;
  if ((jbytes += n) > JOURNAL_MAX)
    abort(); /* a forgotten writer must not fill the disk */
  while (n) {
    ssize_t w = write(jfd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      abort(); /* a journal that lies would make the test lie */
    c += w;
    n -= (size_t)w;
  }
}

static bool journal_on(void)
{
  if (jfd == -2) {
    const char *j = getenv("PLOOP_POWERFAIL_JOURNAL"), *d = getenv("PLOOP_POWERFAIL_DIR");
    jfd = -1;
    if (j && d && realpath(d, jdir)) {
      jdir_len = strlen(jdir);
      jfd = open(j, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    }
    const char *c = getenv("CRASH_CUT_AT");
    cut_at = c ? strtoull(c, NULL, 10) : 0;
  }
  return jfd >= 0;
}

/* Journal id of the file behind FD, or -1 if it is not one we track. */
static int file_id(int fd)
{
  struct stat st;
  if (fstat(fd, &st) < 0)
    return -1;
  for (unsigned i = 0; i < n_files; i++)
    if (files[i].dev == st.st_dev && files[i].ino == st.st_ino)
      return (int)i;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0)
    return -1;
  path[n] = 0;
  if (strncmp(path, jdir, jdir_len) || path[jdir_len] != '/')
    return -1;
  const char *name = path + jdir_len + 1;
  if (strstr(name, ".xml") || strstr(name, ".lck"))
    return -1; /* the descriptor is replaced by rename; not modelled here */
  if (n_files == MAX_FILES)
    abort();
  unsigned id = n_files++;
  files[id].dev = st.st_dev;
  files[id].ino = st.st_ino;
  /* Opened through the fd, not the name: the same inode, and holding it
   * open keeps its number from being reused while we record. */
  files[id].rfd = open(link, O_RDONLY | O_CLOEXEC);
  if (files[id].rfd < 0)
    abort();
  struct rec r = {REC_MAGIC, REC_FILE, id, 0, (uint64_t)st.st_dev, (uint64_t)n, (uint64_t)st.st_ino, 0};
  jwrite(&r, sizeof r);
  jwrite(path, (size_t)n);
  return (int)id;
}

static uint64_t size_of(int fd)
{
  struct stat st;
  return fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The current bytes [off, off+len) of file ID (zeros past its end). */
static void journal_old(int id, uint64_t off, uint64_t len)
{
  char buf[65536];
  while (len) {
    size_t n = len < sizeof buf ? len : sizeof buf;
    ssize_t r = pread(files[id].rfd, buf, n, (off_t)off);
    if (r < 0)
      r = 0;
    memset(buf + r, 0, n - (size_t)r);
    jwrite(buf, n);
    off += n;
    len -= n;
  }
}

/* Called before each change to a tracked file is journaled and made. */
static void change_point(void)
{
  if (cut_at && ++n_changes == cut_at) {
    kill(getpid(), SIGKILL);
    for (;;)
      pause();
  }
}

static void journal_write(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
  int id = file_id(fd);
  if (id < 0)
    return;
  change_point();
  uint64_t len = 0;
  for (int i = 0; i < iovcnt; i++)
    len += iov[i].iov_len;
  uint64_t old = size_of(fd);
  struct rec r = {REC_MAGIC, REC_WRITE, (uint32_t)id, 0, off, len, old, off + len > old ? off + len : old};
  jwrite(&r, sizeof r);
  journal_old(id, off, len);
  for (int i = 0; i < iovcnt; i++)
    jwrite(iov[i].iov_base, iov[i].iov_len);
}

static void journal_sync(int fd)
{
  int id = file_id(fd);
  if (id < 0)
    return;
  struct rec r = {REC_MAGIC, REC_SYNC, (uint32_t)id, 0, 0, 0, 0, 0};
  jwrite(&r, sizeof r);
}

#define REAL(ret, name, ...)                                                                                 \
  static ret (*real_##name)(__VA_ARGS__);                                                                    \
  if (!real_##name)                                                                                          \
    real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
  REAL(ssize_t, pwrite64, int, const void *, size_t, off_t);
  pthread_mutex_lock(&jlock);
  if (journal_on()) {
    struct iovec v = {(void *)buf, n};
    journal_write(fd, &v, 1, (uint64_t)off);
  }
  ssize_t rc = real_pwrite64(fd, buf, n, off);
  pthread_mutex_unlock(&jlock);
  return rc;
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
  REAL(int, fallocate64, int, int, off_t, off_t);
  pthread_mutex_lock(&jlock);
  int id = journal_on() ? file_id(fd) : -1;
  if (id >= 0) {
    change_point();
    /* Every mode the library uses leaves zeros (or keeps data already
     * there, for plain allocation inside the file: then old == new). */
    uint64_t old = size_of(fd), end = (uint64_t)off + (uint64_t)len;
    uint64_t new_size = (mode & FALLOC_FL_KEEP_SIZE) || end <= old ? old : end;
    bool zero = mode & (FALLOC_FL_ZERO_RANGE | FALLOC_FL_PUNCH_HOLE);
    uint64_t zoff = zero ? (uint64_t)off : old, zlen = 0;
    if (zero)
      zlen = (uint64_t)len;
    else if (end > old)
      zlen = end - old; /* new space past the end reads as zeros */
    if (mode & FALLOC_FL_KEEP_SIZE && zoff + zlen > old)
      zlen = zoff < old ? old - zoff : 0;
    struct rec r = {REC_MAGIC, REC_ZERO, (uint32_t)id, 0, zoff, zlen, old, new_size};
    jwrite(&r, sizeof r);
    journal_old(id, zoff, zlen);
  }
  int rc = real_fallocate64(fd, mode, off, len);
  pthread_mutex_unlock(&jlock);
  return rc;
}

int ftruncate64(int fd, off_t len)
{
  REAL(int, ftruncate64, int, off_t);
  pthread_mutex_lock(&jlock);
  int id = journal_on() ? file_id(fd) : -1;
  if (id >= 0) {
    change_point();
    uint64_t old = size_of(fd), nl = (uint64_t)len;
    struct rec r = {REC_MAGIC, REC_TRUNC, (uint32_t)id, 0, nl, nl < old ? old - nl : 0, old, nl};
    jwrite(&r, sizeof r);
    if (nl < old)
      journal_old(id, nl, old - nl);
  }
  int rc = real_ftruncate64(fd, len);
  pthread_mutex_unlock(&jlock);
  return rc;
}

int fdatasync(int fd)
{
  REAL(int, fdatasync, int);
  int rc = real_fdatasync(fd);
  pthread_mutex_lock(&jlock);
  /* Marked after it returns: only then is everything before it durable. */
  if (rc == 0 && journal_on())
    journal_sync(fd);
  pthread_mutex_unlock(&jlock);
  return rc;
}

int fsync(int fd)
{
  REAL(int, fsync, int);
  int rc = real_fsync(fd);
  pthread_mutex_lock(&jlock);
  if (rc == 0 && journal_on())
    journal_sync(fd);
  pthread_mutex_unlock(&jlock);
  return rc;
}

int io_submit(io_context_t ctx, long nr, struct iocb *ios[])
{
  REAL(int, io_submit, io_context_t, long, struct iocb **);
  pthread_mutex_lock(&jlock);
  if (journal_on())
    for (long i = 0; i < nr; i++) {
      struct iocb *cb = ios[i];
      if (cb->aio_lio_opcode == IO_CMD_PWRITE) {
        struct iovec v = {cb->u.c.buf, cb->u.c.nbytes};
        journal_write(cb->aio_fildes, &v, 1, (uint64_t)cb->u.c.offset);
      } else if (cb->aio_lio_opcode == IO_CMD_PWRITEV) {
        journal_write(cb->aio_fildes, cb->u.v.vec, cb->u.v.nr, (uint64_t)cb->u.v.offset);
      } /* an aio fsync is marked when it completes: see io_getevents */
    }
  int rc = real_io_submit(ctx, nr, ios);
  pthread_mutex_unlock(&jlock);
  return rc;
}

int io_getevents(io_context_t ctx, long min_nr, long nr, struct io_event *events, struct timespec *timeout)
{
  REAL(int, io_getevents, io_context_t, long, long, struct io_event *, struct timespec *);
  int rc = real_io_getevents(ctx, min_nr, nr, events, timeout);
  pthread_mutex_lock(&jlock);
  if (journal_on())
    for (int i = 0; i < rc; i++) {
      struct iocb *cb = events[i].obj;
      if ((cb->aio_lio_opcode == IO_CMD_FSYNC || cb->aio_lio_opcode == IO_CMD_FDSYNC) &&
          (long)events[i].res == 0)
        journal_sync(cb->aio_fildes);
    }
  pthread_mutex_unlock(&jlock);
  return rc;
}

/* ---- replay ---- */

struct jop {
  struct rec r;
  long payload; /* offset of the payload in the journal */
};

static uint64_t rng_state;
static uint64_t rng(void)
{
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void die(const char *what, const char *path)
{
  fprintf(stderr, "powerfail: %s %s: %s\n", what, path, strerror(errno));
  exit(1);
}

static void copy_range(FILE *j, long at, int fd, uint64_t off, uint64_t len, const char *path)
{
  static char buf[65536];
  if (fseek(j, at, SEEK_SET) < 0)
    die("seek journal for", path);
  while (len) {
    size_t n = len < sizeof buf ? len : sizeof buf;
    if (fread(buf, 1, n, j) != n)
      die("short journal for", path);
    if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n)
      die("write", path);
    off += n;
    len -= n;
  }
}

static void zero_range(int fd, uint64_t off, uint64_t len, const char *path)
{
  static const char z[65536];
  while (len) {
    size_t n = len < sizeof z ? len : sizeof z;
    if (pwrite(fd, z, n, (off_t)off) != (ssize_t)n)
      die("write", path);
    off += n;
    len -= n;
  }
}

/* Opens, for writing, the file of inode DEV:INO last seen as PATH: that
 * name if it still leads to the inode, else the entry of PATH's directory
 * that does (renamed, or linked under another name). -1 with errno ENOENT
 * when no name leads to it any more. PATH is updated to the name used. */
static int open_inode(char *path, uint64_t dev, uint64_t ino)
{
  struct stat st;
  int fd = open(path, O_WRONLY);
  if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino)
    return fd;
  if (fd >= 0)
    close(fd);
  else if (errno != ENOENT)
    die("open", path);
  char *slash = strrchr(path, '/');
  if (!slash)
    return errno = ENOENT, -1;
  *slash = 0;
  DIR *d = opendir(path);
  if (!d)
    die("open directory", path);
  *slash = '/';
  struct dirent *e;
  fd = -1;
  while (fd < 0 && (e = readdir(d))) {
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino)
      continue;
    snprintf(slash + 1, PATH_MAX - (size_t)(slash + 1 - path), "%s", e->d_name);
    fd = open(path, O_WRONLY);
    if (fd < 0)
      die("open", path);
  }
  closedir(d);
  if (fd < 0)
    errno = ENOENT;
  return fd;
}

int powerfail_replay(const char *journal, uint64_t seed)
{
  rng_state = seed / 10;
  FILE *j = fopen(journal, "r");
  if (!j)
    die("open", journal);
  static char paths[MAX_FILES][PATH_MAX];
  static uint64_t devs[MAX_FILES], inos[MAX_FILES];
  size_t n = 0, cap = 1024;
  struct jop *ops = malloc(cap * sizeof *ops);
  struct rec r;
  while (fread(&r, sizeof r, 1, j) == 1 && r.magic == REC_MAGIC) {
    long at = ftell(j);
    uint64_t skip = r.type == REC_WRITE ? 2 * r.len : r.type == REC_SYNC ? 0 : r.len;
    if (r.type == REC_FILE && r.file < MAX_FILES && r.len < PATH_MAX) {
      if (fread(paths[r.file], 1, r.len, j) != r.len)
        break;
      paths[r.file][r.len] = 0;
      devs[r.file] = r.off;
      inos[r.file] = r.old_size;
      continue;
    }
    /* A record whose payload was cut by the kill never reached the file. */
    if (fseek(j, (long)skip, SEEK_CUR) < 0 || ftell(j) - at != (long)skip)
      break;
    struct stat st;
    if (fstat(fileno(j), &st) < 0 || (uint64_t)ftell(j) > (uint64_t)st.st_size)
      break;
    if (n == cap)
      ops = realloc(ops, (cap *= 2) * sizeof *ops);
    ops[n++] = (struct jop){r, at};
  }
  /* The policy: 0 = nothing unsynced survives, 1 = all of it, else (most
   * often, since it is what finds ordering bugs) a random mix. */
  unsigned policy = (unsigned)(seed % 10);
  uint64_t kept = 0, dropped = 0, undone = 0;
  for (unsigned f = 0; f < MAX_FILES; f++) {
    if (!paths[f][0])
      continue;
    size_t last_sync = 0; /* index after the last sync of this file */
    for (size_t i = 0; i < n; i++)
      if (ops[i].r.file == f && ops[i].r.type == REC_SYNC)
        last_sync = i + 1;
    int fd = open_inode(paths[f], devs[f], inos[f]);
    if (fd < 0)
      continue; /* unlinked later (merged away): nothing to roll back */
    /* Undo, newest first: back to the state at the last sync. */
    for (size_t i = n; i-- > last_sync;) {
      const struct rec *o = &ops[i].r;
      if (o->file != f || o->type == REC_SYNC)
        continue;
      undone++;
      if (o->type == REC_WRITE || o->type == REC_ZERO) {
        uint64_t end = o->off + o->len < o->old_size ? o->off + o->len : o->old_size;
        if (end > o->off)
          copy_range(j, ops[i].payload, fd, o->off, end - o->off, paths[f]);
      } else if (o->type == REC_TRUNC && o->old_size > o->new_size) {
        if (ftruncate(fd, (off_t)o->old_size) < 0)
          die("truncate", paths[f]);
        copy_range(j, ops[i].payload, fd, o->new_size, o->old_size - o->new_size, paths[f]);
      }
      if (ftruncate(fd, (off_t)o->old_size) < 0)
        die("truncate", paths[f]);
    }
    /* Redo, oldest first, sector by sector: what the disk happened to keep. */
    for (size_t i = last_sync; i < n; i++) {
      const struct rec *o = &ops[i].r;
      if (o->file != f || o->type == REC_SYNC)
        continue;
      if (o->type == REC_TRUNC) {
        bool keep = policy == 1 || (policy > 1 && rng() % 2);
        if (keep && ftruncate(fd, (off_t)o->new_size) < 0)
          die("truncate", paths[f]);
        keep ? kept++ : dropped++;
        continue;
      }
      if (o->type == REC_ZERO && o->new_size > o->old_size) {
        /* Growing by fallocate is one metadata change: all or nothing. */
        struct stat st;
        bool keep = policy == 1 || (policy > 1 && rng() % 2);
        if (keep && fstat(fd, &st) == 0 && (uint64_t)st.st_size < o->new_size &&
            ftruncate(fd, (off_t)o->new_size) < 0)
          die("truncate", paths[f]);
        keep ? kept++ : dropped++;
        continue;
      }
      /* A write past the end changes the size in one metadata update (all or
       * nothing); its sectors land independently, and a lost one in new
       * space reads as zeros (an unwritten extent). */
      struct stat st;
      if (fstat(fd, &st) < 0)
        die("stat", paths[f]);
      uint64_t limit = (uint64_t)st.st_size; /* data past the end is not visible */
      if (o->new_size > limit && (policy == 1 || (policy > 1 && rng() % 2))) {
        if (ftruncate(fd, (off_t)o->new_size) < 0)
          die("truncate", paths[f]);
        limit = o->new_size;
      }
      for (uint64_t s = 0; s < o->len; s += 512) {
        uint64_t l = o->len - s < 512 ? o->len - s : 512;
        bool keep = policy == 1 || (policy > 1 && rng() % 2);
        if (!keep || o->off + s >= limit) {
          dropped++;
          continue;
        }
        kept++;
        if (o->type == REC_WRITE)
          copy_range(j, ops[i].payload + (long)o->len + (long)s, fd, o->off + s, l, paths[f]);
        else
          zero_range(fd, o->off + s, l, paths[f]);
      }
    }
    if (fsync(fd) < 0 || close(fd) < 0)
      die("sync", paths[f]);
  }
  printf("powerfail: policy %s: %llu unsynced changes undone; %llu sectors kept, %llu lost\n",
         policy == 0   ? "none-survive"
         : policy == 1 ? "all-survive"
                       : "random",
         (unsigned long long)undone, (unsigned long long)kept, (unsigned long long)dropped);
  fclose(j);
  free(ops);
  return 0;
}
