/* The ploop/Parallels on-disk header and BAT layout (formats/ploop-v2.md).
 * Everything on disk is little-endian; conversions happen here only. */
#ifndef PLOOP_FORMAT_H
#define PLOOP_FORMAT_H

#include <assert.h>
#include <endian.h>
#include <stddef.h>
#include <stdint.h>

#define PLOOP_SIG_V1 "WithoutFreeSpace"
#define PLOOP_SIG_V2 "WithouFreSpacExt"
#define PLOOP_SIG_LEN 16
#define PLOOP_IMAGE_TYPE 2u         /* m_Type: PRL_IMAGE_COMPRESSED */
#define PLOOP_IN_USE 0x746F6E59u    /* "Ynot": open read-write */
#define PLOOP_CLEAN_V20 0u          /* closed cleanly */
#define PLOOP_CLEAN_V21 0x312e3276u /* "v2.1": closed, format extension present */
#define PLOOP_CIF_EMPTY 0x1u
#define PLOOP_CIF_FMT_CONVERT 0x2u
#define PLOOP_HEADER_SIZE 64u
#define PLOOP_BAT_FIRST_SLOT 16u     /* the header covers u32 slots 0..15 */
#define PLOOP_ZERO_INDEX 0xFFFFFFFFu /* reserved by the kernel; never valid */
/* ploop's library limit on the virtual size (50 TiB). */
#define PLOOP_MAX_VIRTUAL_BYTES (50ull << 40)
/* The whole BAT is held in memory while a delta is open: at most 2^28
 * entries (1 GiB). Only small clusters meet it below 50 TiB (32 KiB
 * clusters: 8 TiB); refused at create and resize (bad parameter), and at
 * open, check and stream receive (corrupt), so that a header cannot make
 * us allocate more. */
#define PLOOP_MAX_BAT_ENTRIES (1ull << 28)

struct ploop_header {
  char signature[16];
  uint32_t type;
  uint32_t heads;
  uint32_t cylinders;
  uint32_t cluster_sectors; /* m_Sectors */
  uint32_t bat_entries;     /* m_Size */
  uint64_t size_sectors;    /* v2: u64; v1: low u32 only */
  uint32_t in_use;
  uint32_t first_block; /* sectors */
  uint32_t flags;
  uint64_t ext_offset;
} __attribute__((packed));

static_assert(sizeof(struct ploop_header) == PLOOP_HEADER_SIZE, "header is 64 bytes");
static_assert(offsetof(struct ploop_header, type) == 16, "m_Type");
static_assert(offsetof(struct ploop_header, cluster_sectors) == 28, "m_Sectors");
static_assert(offsetof(struct ploop_header, bat_entries) == 32, "m_Size");
static_assert(offsetof(struct ploop_header, size_sectors) == 36, "m_SizeInSectors");
static_assert(offsetof(struct ploop_header, in_use) == 44, "m_DiskInUse");
static_assert(offsetof(struct ploop_header, first_block) == 48, "m_FirstBlockOffset");
static_assert(offsetof(struct ploop_header, flags) == 52, "m_Flags");
static_assert(offsetof(struct ploop_header, ext_offset) == 56, "m_FormatExtensionOffset");

/* Header fields in host order, decoded once at the door. */
struct ploop_header_host {
  int version;
  uint32_t type, heads, cylinders, cluster_sectors, bat_entries;
  uint64_t size_sectors;
  uint32_t in_use, first_block, flags;
  uint64_t ext_offset;
};

static inline void ploop_header_decode(const void *raw, struct ploop_header_host *h)
{
  const struct ploop_header *p = raw;
  h->version = 0;
  if (__builtin_memcmp(p->signature, PLOOP_SIG_V2, PLOOP_SIG_LEN) == 0)
    h->version = 2;
  else if (__builtin_memcmp(p->signature, PLOOP_SIG_V1, PLOOP_SIG_LEN) == 0)
    h->version = 1;
  h->type = le32toh(p->type);
  h->heads = le32toh(p->heads);
  h->cylinders = le32toh(p->cylinders);
  h->cluster_sectors = le32toh(p->cluster_sectors);
  h->bat_entries = le32toh(p->bat_entries);
  h->size_sectors = le64toh(p->size_sectors);
  if (h->version == 1)
    h->size_sectors &= 0xffffffffu;
  h->in_use = le32toh(p->in_use);
  h->first_block = le32toh(p->first_block);
  h->flags = le32toh(p->flags);
  h->ext_offset = le64toh(p->ext_offset);
}

static inline void ploop_header_encode(const struct ploop_header_host *h, void *raw)
{
  struct ploop_header *p = raw;
  __builtin_memcpy(p->signature, h->version == 1 ? PLOOP_SIG_V1 : PLOOP_SIG_V2, PLOOP_SIG_LEN);
  p->type = htole32(h->type);
  p->heads = htole32(h->heads);
  p->cylinders = htole32(h->cylinders);
  p->cluster_sectors = htole32(h->cluster_sectors);
  p->bat_entries = htole32(h->bat_entries);
  p->size_sectors = htole64(h->version == 1 ? (h->size_sectors & 0xffffffffu) : h->size_sectors);
  p->in_use = htole32(h->in_use);
  p->first_block = htole32(h->first_block);
  p->flags = htole32(h->flags);
  p->ext_offset = htole64(h->ext_offset);
}

#endif
