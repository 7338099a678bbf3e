/* Offline compaction of a disk that nobody serves: libext2fs reads the
 * ext2/3/4 free-block bitmap through the disk's own virtual blocks (an
 * io_manager over ploop_disk_pread, so no device, loop or FUSE is needed),
 * the top delta's clusters that hold only free blocks are discarded, and
 * the image is compacted as online (ploop_disk_compact). */
#include <errno.h>
#include <ext2fs/ext2_fs.h>
#include <ext2fs/ext2fs.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach.h"

/* ---- an io_manager reading the disk's virtual blocks ------------------ */

/* The disk travels in the channel's name ("ploop-disk:%p"): libext2fs gives
 * an io_manager's open nothing but the name, and a name keeps this free of
 * global state (two disks may be read at once). */
#define DISK_NAME_PREFIX "ploop-disk:"

static struct struct_io_manager disk_io_manager;

static errcode_t disk_io_open(const char *name, int flags, io_channel *channel)
{
  void *disk = NULL;
  if (strncmp(name, DISK_NAME_PREFIX, strlen(DISK_NAME_PREFIX)) != 0 ||
      sscanf(name + strlen(DISK_NAME_PREFIX), "%p", &disk) != 1 || !disk)
    return EXT2_ET_BAD_DEVICE_NAME;
  if (flags & IO_FLAG_RW)
    return EXT2_ET_RO_FILSYS;
  io_channel io = NULL;
  errcode_t rc = ext2fs_get_memzero(sizeof(*io), &io);
  if (rc)
    return rc;
  rc = ext2fs_get_mem(strlen(name) + 1, &io->name);
  if (rc) {
    ext2fs_free_mem(&io);
    return rc;
  }
  strcpy(io->name, name);
  io->magic = EXT2_ET_MAGIC_IO_CHANNEL;
  io->manager = &disk_io_manager;
  io->block_size = 1024;
  io->refcount = 1;
  io->private_data = disk;
  *channel = io;
  return 0;
}

static errcode_t disk_io_close(io_channel io)
{
  if (--io->refcount > 0)
    return 0;
  ext2fs_free_mem(&io->name);
  ext2fs_free_mem(&io);
  return 0;
}

static errcode_t disk_io_set_blksize(io_channel io, int blksize)
{
  io->block_size = blksize;
  return 0;
}

static errcode_t disk_io_read64(io_channel io, unsigned long long block, int count, void *data)
{
  /* A negative count is a byte count (libext2fs's convention). */
  uint64_t len = count < 0 ? (uint64_t)-(int64_t)count : (uint64_t)count * (uint64_t)io->block_size;
  uint64_t off = block * (uint64_t)io->block_size;
  struct ploop_disk *disk = io->private_data;
  uint64_t size = ploop_disk_size(disk);
  if (off > size || len > size - off)
    return EXT2_ET_SHORT_READ;
  if (ploop_disk_pread(disk, data, len, off) < 0)
    return ploop_get_errno() ? ploop_get_errno() : EXT2_ET_SHORT_READ;
  return 0;
}

static errcode_t disk_io_read(io_channel io, unsigned long block, int count, void *data)
{
  return disk_io_read64(io, block, count, data);
}

static errcode_t disk_io_write64(io_channel io, unsigned long long block, int count, const void *data)
{
  return EXT2_ET_RO_FILSYS;
}

static errcode_t disk_io_write(io_channel io, unsigned long block, int count, const void *data)
{
  return EXT2_ET_RO_FILSYS;
}

static errcode_t disk_io_write_byte(io_channel io, unsigned long offset, int count, const void *data)
{
  return EXT2_ET_RO_FILSYS;
}

static errcode_t disk_io_flush(io_channel io)
{
  return 0;
}

static errcode_t disk_io_set_option(io_channel io, const char *option, const char *arg)
{
  return EXT2_ET_INVALID_ARGUMENT;
}

static struct struct_io_manager disk_io_manager = {
    .magic = EXT2_ET_MAGIC_IO_MANAGER,
    .name = "ploop disk I/O manager",
    .open = disk_io_open,
    .close = disk_io_close,
    .set_blksize = disk_io_set_blksize,
    .read_blk = disk_io_read,
    .write_blk = disk_io_write,
    .flush = disk_io_flush,
    .write_byte = disk_io_write_byte,
    .set_option = disk_io_set_option,
    .read_blk64 = disk_io_read64,
    .write_blk64 = disk_io_write64,
};

/* ---- which filesystem ------------------------------------------------- */

/* What the first 64 KiB say: "ext" (the ext2/3/4 magic on the whole disk),
 * "xfs", a GPT, "" for nothing recognised, "none" when they are all zero. */
static int probe_fs(struct ploop_disk *disk, char *type, size_t len)
{
  enum { PROBE = 65536 };
  uint8_t *buf = malloc(PROBE);
  if (!buf)
    return ploop_set_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  uint64_t n = ploop_disk_size(disk) < PROBE ? ploop_disk_size(disk) : PROBE;
  if (ploop_disk_pread(disk, buf, n, 0) < 0) {
    free(buf);
    return -1;
  }
  bool zero = true;
  for (uint64_t i = 0; i < n && zero; i++)
    zero = buf[i] == 0;
  const char *t = "";
  if (n >= 1024 + 0x3a && buf[1024 + 0x38] == 0x53 && buf[1024 + 0x39] == 0xef)
    t = "ext";
  else if (n >= 4 && memcmp(buf, "XFSB", 4) == 0)
    t = "xfs";
  else if (n >= 520 && memcmp(buf + 512, "EFI PART", 8) == 0)
    t = "a GPT partition table"; /* OpenVZ's own init makes one */
  else if (zero)
    t = "none";
  snprintf(type, len, "%s", t);
  free(buf);
  return 0;
}

/* ---- the compaction ---------------------------------------------------- */

static int ext_error(const char *dir, errcode_t e, const char *what)
{
  return ploop_set_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: %s: %s", dir, what, error_message(e));
}

/* Opens the filesystem on DISK read-only and checks it may be trusted:
 * cleanly unmounted, no journal to replay, no errors recorded. */
static int ext_open(struct ploop_disk *disk, const char *dir, ext2_filsys *out)
{
  char name[64];
  snprintf(name, sizeof name, DISK_NAME_PREFIX "%p", (void *)disk);
  ext2_filsys fs = NULL;
  errcode_t e = ext2fs_open2(name, NULL, EXT2_FLAG_64BITS, 0, 0, &disk_io_manager, &fs);
  if (e)
    return ext_error(dir, e, "ext2/3/4 superblock");
  struct ext2_super_block *sb = fs->super;
  const char *why = NULL;
  if (ext2fs_has_feature_journal_needs_recovery(sb))
    why = "its journal needs recovery";
  else if (!(sb->s_state & EXT2_VALID_FS) || (sb->s_state & EXT2_ERROR_FS))
    why = "it was not cleanly unmounted or has errors";
  else if (ext2fs_has_feature_journal_dev(sb))
    why = "it is an external journal";
  if (why) {
    ext2fs_close_free(&fs);
    return ploop_set_error(PLOOP_ERR_PARAM, EUCLEAN,
                           "%s: the filesystem cannot be compacted offline: %s; run e2fsck (ploop mount -F) first",
                           dir, why);
  }
  e = ext2fs_read_block_bitmap(fs);
  if (e) {
    ext2fs_close_free(&fs);
    return ext_error(dir, e, "block bitmap");
  }
  *out = fs;
  return 0;
}

/* True when every filesystem block that [START, END) touches is free, or
 * lies past the filesystem's end (a disk larger than its filesystem). */
static bool range_free(ext2_filsys fs, uint64_t start, uint64_t end)
{
  uint64_t bs = fs->blocksize;
  uint64_t b0 = start / bs, b1 = (end + bs - 1) / bs;
  uint64_t total = ext2fs_blocks_count(fs->super);
  if (b0 < fs->super->s_first_data_block)
    return false; /* the boot block (1 KiB blocks): never in the bitmap */
  if (b0 >= total)
    return true;
  if (b1 > total)
    b1 = total;
  return ext2fs_test_block_bitmap_range2(fs->block_map, b0, (unsigned)(b1 - b0)) != 0;
}

/* Discards the top's clusters that hold only free blocks. */
static int discard_free(struct ploop_disk *disk, ext2_filsys fs, struct ploop_offline_compact_stats *st)
{
  uint64_t size = ploop_disk_size(disk), cb = ploop_disk_cluster_size(disk);
  struct ploop_extent ext[256];
  for (uint64_t off = 0; off < size;) {
    int n = ploop_disk_block_status(disk, off, size - off, ext, 256);
    if (n <= 0)
      return n < 0 ? -1 : 0;
    for (int i = 0; i < n; i++) {
      if (ext[i].depth != 1)
        continue; /* only the top's own clusters are ours to give back */
      for (uint64_t o = ext[i].offset; o < ext[i].offset + ext[i].length; o += cb) {
        if (ploop_cancelled())
          return ploop_set_error(PLOOP_ERR_CANCELLED, EINTR, "interrupted");
        uint64_t end = o + cb < size ? o + cb : size;
        if (!range_free(fs, o, end))
          continue;
        if (ploop_disk_discard(disk, o, end - o) < 0)
          return -1;
        st->clusters_discarded++;
      }
    }
    off = ext[n - 1].offset + ext[n - 1].length;
  }
  return ploop_disk_flush(disk);
}

int ploop_fs_compact_offline(const char *disk_dir, struct ploop_offline_compact_stats *st)
{
  memset(st, 0, sizeof *st);
  struct ploop_descriptor *d = ploop_descriptor_load(disk_dir);
  if (!d)
    return -1;
  const struct ploop_image_desc *top = ploop_descriptor_find_image(d, d->top_guid);
  if (top && top->plain) {
    ploop_descriptor_free(d);
    return ploop_set_error(PLOOP_ERR_PARAM, EINVAL,
                           "%s: the top image is raw: nothing to compact (ploop convert it to ploop1 first)",
                           disk_dir);
  }
  ploop_descriptor_free(d);

  /* Probed read-only first: a disk we cannot compact is not touched at all
   * (opening it read-write would set and clear its in-use mark). */
  struct ploop_disk *disk = ploop_disk_open(disk_dir, NULL, PLOOP_OPEN_RDONLY);
  if (!disk)
    return -1;
  int rc = probe_fs(disk, st->fstype, sizeof st->fstype);
  ploop_disk_close(disk);
  if (rc < 0)
    return -1;
  if (strcmp(st->fstype, "ext") != 0) {
    const char *t = st->fstype;
    if (strcmp(t, "none") == 0)
      return ploop_set_error(PLOOP_ERR_PARAM, EOPNOTSUPP,
                             "%s: no filesystem on the disk; offline compaction reads ext2/3/4 only", disk_dir);
    return ploop_set_error(PLOOP_ERR_PARAM, EOPNOTSUPP,
                           "%s: offline compaction reads ext2/3/4 only, this disk holds %s: "
                           "mount it (ploop mount -m DIR) and run ploop compact",
                           disk_dir, *t ? t : "an unknown filesystem");
  }
  snprintf(st->fstype, sizeof st->fstype, "ext2/3/4");

  disk = ploop_disk_open(disk_dir, NULL, PLOOP_OPEN_RDWR);
  if (!disk)
    return -1;
  ext2_filsys fs = NULL;
  rc = ext_open(disk, disk_dir, &fs);
  if (rc == 0) {
    rc = discard_free(disk, fs, st);
    ext2fs_close_free(&fs);
  }
  st->bytes_discarded = st->clusters_discarded * ploop_disk_cluster_size(disk);
  /* Also after an interruption: what was discarded is consistent, and
   * compaction stops between two moves when asked to. */
  if (rc == 0 || ploop_get_status() == PLOOP_ERR_CANCELLED) {
    int status = ploop_get_status();
    int crc = ploop_disk_compact(disk, &st->bytes_reclaimed);
    if (rc == 0)
      rc = crc;
    else if (crc == 0)
      ploop_set_error(status, EINTR, "interrupted"); /* restore the first error */
  }
  if (ploop_disk_close(disk) < 0 && rc == 0)
    rc = -1;
  return rc;
}
