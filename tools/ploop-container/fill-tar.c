/* Safe tarball extraction into a container root (see fill.h). Every member
 * is created relative to a directory fd resolved with openat2
 * RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so nothing, not even a symlink planted
 * by an earlier member, can make us write outside the root. Reads ustar, GNU
 * (long names, base-256 sizes) and pax headers; gzip through zlib. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <zlib.h>

#include "error.h"
#include "fill.h"
#include "util.h"

struct tar_header {
  char name[100], mode[8], uid[8], gid[8], size[12], mtime[12], chksum[8], type, linkname[100];
  char magic[6], version[2], uname[32], gname[32], devmajor[8], devminor[8], prefix[155], pad[12];
};
_Static_assert(sizeof(struct tar_header) == 512, "tar header is one block");

struct member {
  char path[4096], link[4096];
  uint64_t size;
  mode_t mode;
  uid_t uid;
  gid_t gid;
  int64_t mtime;
  unsigned devmajor, devminor;
  char type;
};

static uint64_t tar_number(const char *f, size_t len)
{
  if ((unsigned char)f[0] & 0x80) {  /* GNU base-256 */
    uint64_t v = (unsigned char)f[0] & 0x7f;
    for (size_t i = 1; i < len; i++)
      v = (v << 8) | (unsigned char)f[i];
    return v;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < len && (f[i] == ' ' || f[i] == 0))
    i++;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; i++)
    v = v * 8 + (uint64_t)(f[i] - '0');
  return v;
}

static bool checksum_ok(const struct tar_header *h)
{
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  return true; /* tests/fuzz: reach the extraction behind the sum; no other build defines it */
#endif
  const unsigned char *b = (const unsigned char *)h;
  uint64_t sum = 0;
  for (size_t i = 0; i < 512; i++)
    sum += (i >= 148 && i < 156) ? ' ' : b[i];
  return sum == tar_number(h->chksum, sizeof h->chksum);
}

static int read_exact(gzFile gz, void *buf, size_t len, const char *tarball)
{
  int n = gzread(gz, buf, (unsigned)len);
  if (n < 0 || (size_t)n != len)
    return ct_fail(0, "%s: truncated or corrupt archive", tarball);
  return 0;
}

static int skip_data(gzFile gz, uint64_t size, const char *tarball)
{
  uint64_t padded = (size + 511) & ~(uint64_t)511;
  char buf[65536];
  while (padded) {
    size_t n = padded > sizeof buf ? sizeof buf : (size_t)padded;
    if (read_exact(gz, buf, n, tarball) < 0)
      return -1;
    padded -= n;
  }
  return 0;
}

/* Reads a member's data as a string (GNU long names, pax records). */
static int read_string(gzFile gz, uint64_t size, char *out, size_t outlen, const char *tarball)
{
  if (size >= outlen)
    return ct_fail(0, "%s: name or pax header too long", tarball);
  uint64_t padded = (size + 511) & ~(uint64_t)511;
  cleanup_free char *buf = malloc(padded + 1);
  if (!buf || read_exact(gz, buf, padded, tarball) < 0)
    return -1;
  memcpy(out, buf, size);
  out[size] = 0;
  return 0;
}

static void parse_pax(char *recs, struct member *m, bool *have_path, bool *have_link)
{
  char *p = recs;
  while (*p) {
    char *end;
    unsigned long len = strtoul(p, &end, 10);
    if (len == 0 || *end != ' ' || len > strlen(p))
      break;
    char *kv = end + 1, *next = p + len;
    char *eq = strchr(kv, '=');
    if (eq && eq < next) {
      size_t vlen = (size_t)(next - eq - 2);  /* minus '=' and '\n' */
      if (!strncmp(kv, "path=", 5) && vlen < sizeof m->path) {
        memcpy(m->path, eq + 1, vlen);
        m->path[vlen] = 0;
        *have_path = true;
      } else if (!strncmp(kv, "linkpath=", 9) && vlen < sizeof m->link) {
        memcpy(m->link, eq + 1, vlen);
        m->link[vlen] = 0;
        *have_link = true;
      } else if (!strncmp(kv, "size=", 5)) {
        m->size = strtoull(eq + 1, NULL, 10);
      }
    }
    p = next;
  }
}

/* Strips "./" and "/" runs; refuses absolute names and any ".." component. */
static int normalize(char *path, const char *what, const char *tarball)
{
  if (path[0] == '/')
    return ct_fail(0, "%s: refusing absolute %s '%s'", tarball, what, path);
  char out[4096];
  size_t o = 0;
  for (char *s = path; *s;) {
    char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == 2 && s[0] == '.' && s[1] == '.')
      return ct_fail(0, "%s: refusing %s '%s' with a '..' component", tarball, what, path);
    if (len && !(len == 1 && s[0] == '.')) {
      if (o)
        out[o++] = '/';
      memcpy(out + o, s, len);
      o += len;
    }
    s += len;
    while (*s == '/')
      s++;
  }
  out[o] = 0;
  memcpy(path, out, o + 1);
  return 0;
}

/* A symlink at PATH (normalized) with TARGET: does TARGET, read as the
 * kernel will read it once the root is "/", climb above the root? */
static bool link_escapes(const char *path, const char *target)
{
  long depth = 0;
  if (target[0] != '/')
    for (const char *p = path; *p; p++)
      depth += *p == '/';  /* components of the link's directory */
  for (const char *s = target; *s;) {
    const char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == 2 && s[0] == '.' && s[1] == '.') {
      if (--depth < 0)
        return true;
    } else if (len && !(len == 1 && s[0] == '.')) {
      depth++;
    }
    s += len;
    while (*s == '/')
      s++;
  }
  return false;
}

static int open_beneath(int dirfd, const char *name)
{
  struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  return (int)syscall(SYS_openat2, dirfd, name, &how, sizeof how);
}

/* Opens the directory holding PATH's last component, creating missing
 * directories, never through a symlink. *LEAF points into PATH. */
static int open_parent(int rootfd, char *path, const char **leaf, bool create, const char *tarball)
{
  char *slash = strrchr(path, '/');
  if (!slash) {
    *leaf = path;
    return fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
  }
  *slash = 0;
  *leaf = slash + 1;
  int fd = open_beneath(rootfd, path);
  if (fd >= 0 || !create || errno != ENOENT) {
    if (fd < 0)
      ct_fail(errno == ELOOP || errno == EXDEV ? 0 : errno, "%s: '%s' %s", tarball, path,
              errno == ELOOP || errno == EXDEV ? "goes through a symlink: refusing to write through it"
                                               : "cannot be opened");
    *slash = '/';
    return fd;
  }
  /* Walk and create component by component. */
  int cur = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
  for (char *s = path; cur >= 0 && *s;) {
    char *e = strchr(s, '/');
    if (e)
      *e = 0;
    if (mkdirat(cur, s, 0755) < 0 && errno != EEXIST) {
      ct_fail(errno, "%s: mkdir '%s'", tarball, path);
      close(cur);
      cur = -1;
    } else {
      int next = open_beneath(cur, s);
      if (next < 0)
        ct_fail(errno == ELOOP ? 0 : errno, "%s: '%s' %s", tarball, path,
                errno == ELOOP ? "goes through a symlink: refusing to write through it" : "cannot be opened");
      close(cur);
      cur = next;
    }
    if (e)
      *e = '/';
    s = e ? e + 1 : s + strlen(s);
  }
  *slash = '/';
  return cur;
}

static int write_data(gzFile gz, int fd, uint64_t size, const char *tarball, const char *path)
{
  char buf[65536];
  uint64_t left = (size + 511) & ~(uint64_t)511, data = size;
  while (left) {
    size_t n = left > sizeof buf ? sizeof buf : (size_t)left;
    if (read_exact(gz, buf, n, tarball) < 0)
      return -1;
    size_t w = data < n ? (size_t)data : n;
    if (w && write(fd, buf, w) != (ssize_t)w)
      return ct_fail(errno, "write %s", path);
    data -= w;
    left -= n;
  }
  return 0;
}

static int extract_member(gzFile gz, int rootfd, struct member *m, const char *tarball)
{
  if (normalize(m->path, "member", tarball) < 0)
    return -1;
  if (m->path[0] == 0)  /* the root itself ("./") */
    return skip_data(gz, m->type == '0' ? m->size : 0, tarball);
  if (m->type == '2' && link_escapes(m->path, m->link))
    return ct_fail(0, "%s: refusing symlink '%s' -> '%s' pointing outside the root", tarball,
                   m->path, m->link);
  if (m->type == '1' && normalize(m->link, "hard link target", tarball) < 0)
    return -1;
  const char *leaf;
  char pathcopy[4096];
  memcpy(pathcopy, m->path, sizeof pathcopy);
  cleanup_close int dir = open_parent(rootfd, pathcopy, &leaf, true, tarball);
  if (dir < 0)
    return -1;
  mode_t perm = m->mode & 07777;
  if (m->type == '5') {
    if (mkdirat(dir, leaf, perm) < 0 && errno != EEXIST)
      return ct_fail(errno, "%s: mkdir '%s'", tarball, m->path);
    cleanup_close int d = open_beneath(dir, leaf);
    if (d < 0)
      return ct_fail(errno == ELOOP ? 0 : errno, "%s: '%s' is a symlink, not a directory", tarball, m->path);
    if (fchownat(d, "", m->uid, m->gid, AT_EMPTY_PATH) < 0 || fchmodat(dir, leaf, perm, 0) < 0)
      return ct_fail(errno, "%s: set owner/mode of '%s'", tarball, m->path);
    return skip_data(gz, 0, tarball);
  }
  /* Replace what an earlier member put there, never follow it. */
  if (unlinkat(dir, leaf, 0) < 0 && errno != ENOENT && errno != EISDIR)
    return ct_fail(errno, "%s: replace '%s'", tarball, m->path);
  switch (m->type) {
  case '0': case 0: case '7': {
    cleanup_close int fd = openat(dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return ct_fail(errno, "%s: create '%s'", tarball, m->path);
    if (write_data(gz, fd, m->size, tarball, m->path) < 0)
      return -1;
    /* chown before chmod: chown clears setuid bits. */
    if (fchown(fd, m->uid, m->gid) < 0 || fchmod(fd, perm) < 0)
      return ct_fail(errno, "%s: set owner/mode of '%s'", tarball, m->path);
    struct timespec ts[2] = {{m->mtime, 0}, {m->mtime, 0}};
    futimens(fd, ts);
    return 0;
  }
  case '2':
    if (symlinkat(m->link, dir, leaf) < 0)
      return ct_fail(errno, "%s: symlink '%s'", tarball, m->path);
    fchownat(dir, leaf, m->uid, m->gid, AT_SYMLINK_NOFOLLOW);
    return skip_data(gz, 0, tarball);
  case '1': {
    const char *tleaf;
    cleanup_close int tdir = open_parent(rootfd, m->link, &tleaf, false, tarball);
    if (tdir < 0)
      return ct_wrap("hard link '%s'", m->path);
    if (linkat(tdir, tleaf, dir, leaf, 0) < 0)
      return ct_fail(errno, "%s: hard link '%s' -> '%s'", tarball, m->path, m->link);
    return skip_data(gz, 0, tarball);
  }
  case '3': case '4': case '6': {
    mode_t kind = m->type == '3' ? S_IFCHR : m->type == '4' ? S_IFBLK : S_IFIFO;
    if (mknodat(dir, leaf, kind | perm, makedev(m->devmajor, m->devminor)) < 0)
      return ct_fail(errno, "%s: mknod '%s'", tarball, m->path);
    fchownat(dir, leaf, m->uid, m->gid, AT_SYMLINK_NOFOLLOW);
    return skip_data(gz, 0, tarball);
  }
  default:
    return skip_data(gz, m->size, tarball);  /* sparse, volume labels...: ignored */
  }
}

int fill_tar(const char *root, const char *tarball)
{
  gzFile gz = gzopen(tarball, "rb");
  if (!gz)
    return ct_fail(errno, "open %s", tarball);
  cleanup_close int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  int rc = -1;
  if (rootfd < 0) {
    ct_fail(errno, "open %s", root);
    goto out;
  }
  gzbuffer(gz, 1 << 17);
  struct member m;
  bool long_path = false, long_link = false, members = false;
  memset(&m, 0, sizeof m);
  for (;;) {
    struct tar_header h;
    int n = gzread(gz, &h, sizeof h);
    if (n == 0 && members)
      break;  /* no end blocks: tolerated, as GNU tar does */
    if (n != (int)sizeof h) {
      ct_fail(0, "%s: not a tar archive (or truncated)", tarball);
      goto out;
    }
    if (h.name[0] == 0) {  /* end-of-archive zero block */
      rc = members ? 0 : ct_fail(0, "%s: empty archive", tarball);
      goto out;
    }
    if (!checksum_ok(&h)) {
      ct_fail(0, "%s: bad tar header checksum (not a tar archive?)", tarball);
      goto out;
    }
    members = true;
    uint64_t size = tar_number(h.size, sizeof h.size);
    if (h.type == 'L' || h.type == 'K') {
      char *dst = h.type == 'L' ? m.path : m.link;
      if (read_string(gz, size, dst, sizeof m.path, tarball) < 0)
        goto out;
      *(h.type == 'L' ? &long_path : &long_link) = true;
      continue;
    }
    if (h.type == 'x' || h.type == 'g') {
      char recs[8192];
      if (read_string(gz, size, recs, sizeof recs, tarball) < 0)
        goto out;
      if (h.type == 'x')
        parse_pax(recs, &m, &long_path, &long_link);
      continue;
    }
    if (!long_path) {
      if (h.prefix[0] && memcmp(h.magic, "ustar", 5) == 0)
        snprintf(m.path, sizeof m.path, "%.155s/%.100s", h.prefix, h.name);
      else
        snprintf(m.path, sizeof m.path, "%.100s", h.name);
    }
    if (!long_link)
      snprintf(m.link, sizeof m.link, "%.100s", h.linkname);
    if (m.size == 0)
      m.size = size;
    m.type = h.type;
    m.mode = (mode_t)tar_number(h.mode, sizeof h.mode);
    m.uid = (uid_t)tar_number(h.uid, sizeof h.uid);
    m.gid = (gid_t)tar_number(h.gid, sizeof h.gid);
    m.mtime = (int64_t)tar_number(h.mtime, sizeof h.mtime);
    m.devmajor = (unsigned)tar_number(h.devmajor, sizeof h.devmajor);
    m.devminor = (unsigned)tar_number(h.devminor, sizeof h.devminor);
    if (extract_member(gz, rootfd, &m, tarball) < 0)
      goto out;
    long_path = long_link = false;
    memset(&m, 0, sizeof m);
  }
  rc = 0;
out:
  gzclose(gz);
  return rc;
}
