/* The exports: each served disk's live stack under its name, and every
 * snapshot read-only as NAME@UUID, opened on first use and closed when
 * its last client leaves. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd-protocol.h"
#include "server.h"

static struct disk_export *find_disk(const char *name, size_t len) {
  for (size_t i = 0; i < g_cfg.ndisks; i++) {
    struct disk_export *de = &g_cfg.disks[i];
    if (strlen(de->name) == len && memcmp(de->name, name, len) == 0) return de;
  }
  return NULL;
}

/* True when GUID is a snapshot of DE's disk (in the descriptor, not the top). */
static bool is_snapshot(struct disk_export *de, const char *guid) {
  struct ploop_descriptor *d = ploop_disk_descriptor(de->disk);
  if (!d) return false;
  bool found = false;
  if (strcmp(d->top_guid, guid) != 0)
    for (size_t i = 0; i < d->n_snapshots && !found; i++)
      found = strcmp(d->snapshots[i].guid, guid) == 0;
  ploop_descriptor_free(d);
  return found;
}

int export_acquire(const char *name, struct export_ref *out, char *msg, size_t msglen) {
  memset(out, 0, sizeof *out);
  if (g_cfg.ndisks == 0) {
    snprintf(msg, msglen, "no disks are served");
    return -1;
  }
  if (name[0] == 0) {
    out->de = &g_cfg.disks[0];
    out->disk = out->de->disk;
    out->readonly = ploop_disk_readonly(out->disk);
    return 0;
  }
  const char *at = strchr(name, '@');
  struct disk_export *de = find_disk(name, at ? (size_t)(at - name) : strlen(name));
  if (!de) {
    snprintf(msg, msglen, "no export named '%.200s'", name);
    return -1;
  }
  out->de = de;
  if (!at) {
    out->disk = de->disk;
    out->readonly = ploop_disk_readonly(de->disk);
    return 0;
  }
  char guid[PLOOP_UUID_LEN + 1];
  if (ploop_uuid_normalize(at + 1, guid) < 0) {
    snprintf(msg, msglen, "'%.100s' is not a snapshot UUID", at + 1);
    return -1;
  }
  pthread_mutex_lock(&de->lock);
  struct snap_export *s;
  for (s = de->snaps; s; s = s->next)
    if (strcmp(s->guid, guid) == 0) break;
  if (!s) {
    if (!is_snapshot(de, guid)) {
      pthread_mutex_unlock(&de->lock);
      snprintf(msg, msglen, "%s has no snapshot %s", de->name, guid);
      return -1;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
      pthread_mutex_unlock(&de->lock);
      snprintf(msg, msglen, "out of memory");
      return -1;
    }
    /* This process already holds the disk's lock through the live stack. */
    s->disk = ploop_disk_open(de->dir, guid, PLOOP_OPEN_RDONLY | PLOOP_OPEN_NO_LOCK);
    if (!s->disk) {
      snprintf(msg, msglen, "open snapshot %s: %s", guid, ploop_get_error());
      pthread_mutex_unlock(&de->lock);
      free(s);
      return -1;
    }
    memcpy(s->guid, guid, sizeof s->guid);
    s->next = de->snaps;
    de->snaps = s;
  }
  s->refs++;
  pthread_mutex_unlock(&de->lock);
  out->snap = s;
  out->disk = s->disk;
  out->readonly = true;
  return 0;
}

void export_release(struct export_ref *ref) {
  struct snap_export *s = ref->snap;
  if (s) {
    struct disk_export *de = ref->de;
    pthread_mutex_lock(&de->lock);
    if (--s->refs == 0) {
      for (struct snap_export **pp = &de->snaps; *pp; pp = &(*pp)->next)
        if (*pp == s) {
          *pp = s->next;
          break;
        }
      if (ploop_disk_close(s->disk) < 0) nbd_log("close snapshot %s: %s", s->guid, ploop_get_error());
      free(s);
    }
    pthread_mutex_unlock(&de->lock);
  }
  memset(ref, 0, sizeof *ref);
}

unsigned export_open_snapshots(struct disk_export *de) {
  unsigned n = 0;
  for (struct snap_export *s = de->snaps; s; s = s->next) n++;
  return n;
}

/* Capabilities map 1:1 onto flags.  CAN_MULTI_CONN holds because every
 * connection shares the one ploop_disk of the process: a flush on any
 * connection covers writes answered on all of them. */
uint16_t export_flags(const struct export_ref *ref, bool structured) {
  uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_CAN_MULTI_CONN |
               NBD_FLAG_SEND_CACHE;
  if (structured) f |= NBD_FLAG_SEND_DF;
  if (ref->readonly)
    f |= NBD_FLAG_READ_ONLY;
  else
    f |= NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
         NBD_FLAG_SEND_FAST_ZERO;
  return f;
}

int export_list(int (*fn)(void *opaque, const char *name, const char *desc), void *opaque) {
  char name[NBD_MAX_STRING], desc[NBD_MAX_STRING];
  for (size_t i = 0; i < g_cfg.ndisks; i++) {
    struct disk_export *de = &g_cfg.disks[i];
    snprintf(desc, sizeof desc, "ploop disk %s", de->dir);
    if (fn(opaque, de->name, desc) < 0) return -1;
    struct ploop_descriptor *d = ploop_disk_descriptor(de->disk);
    if (!d) continue;
    for (size_t k = 0; k < d->n_snapshots; k++) {
      const struct ploop_snapshot_desc *s = &d->snapshots[k];
      if (strcmp(s->guid, d->top_guid) == 0) continue;
      snprintf(name, sizeof name, "%s@%.36s", de->name, s->guid + 1);
      snprintf(desc, sizeof desc, "snapshot %s of %s (read-only)", s->guid, de->dir);
      if (fn(opaque, name, desc) < 0) {
        ploop_descriptor_free(d);
        return -1;
      }
    }
    ploop_descriptor_free(d);
  }
  return 0;
}

int exports_open_all(char *err, size_t errlen) {
  for (size_t i = 0; i < g_cfg.ndisks; i++) {
    struct disk_export *de = &g_cfg.disks[i];
    pthread_mutex_init(&de->lock, NULL);
    de->ctl_fd = -1;
    /* Read-only opens take no lock: a -r / --snapshot server may run beside
     * the one serving the top read-write. */
    bool ro = g_cfg.readonly || g_cfg.snapshot;
    unsigned flags = ro ? PLOOP_OPEN_RDONLY : PLOOP_OPEN_RDWR | (g_cfg.standby ? PLOOP_OPEN_STANDBY : 0);
    de->disk = ploop_disk_open(de->dir, g_cfg.snapshot, flags);
    if (!de->disk) {
      snprintf(err, errlen, "%s", ploop_get_error());
      return -1;
    }
  }
  return 0;
}

void exports_close_all(void) {
  for (size_t i = 0; i < g_cfg.ndisks; i++) {
    struct disk_export *de = &g_cfg.disks[i];
    if (!de->disk) continue;
    /* Connections are gone: drop snapshot exports, then close the live
     * stack: the close flushes, then clears its in-use mark (a flush of
     * our own before it was one more fdatasync of an idle file per detach). */
    while (de->snaps) {
      struct snap_export *s = de->snaps;
      de->snaps = s->next;
      ploop_disk_close(s->disk);
      free(s);
    }
    if (ploop_disk_close(de->disk) < 0) nbd_log("%s: close: %s", de->dir, ploop_get_error());
    de->disk = NULL;
  }
}
