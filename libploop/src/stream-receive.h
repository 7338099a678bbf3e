/* Shared by the stream receiver's files: stream-receive.c (frames, the
 * writer, commit) and stream-receive-dir.c (the target disk: a directory
 * or an rbd:POOL/NAME disk, made ready, published, undone). Not installed. */
#ifndef PLOOP_STREAM_RECEIVE_H
#define PLOOP_STREAM_RECEIVE_H

#include <limits.h>

#include "internal.h"
#include "io.h"
#include "stream.h"

#define RECV_INFLIGHT_BYTES (64u << 20)
#define RECV_MAX_DEPTH 128u /* within the delta's table of in-flight allocations */

struct layer {
  char guid[PLOOP_UUID_LEN + 1], parent[PLOOP_UUID_LEN + 1];
  char file[NAME_MAX + 1];
  char path[PATH_MAX];
  struct ploop_delta *d;
};

struct wslot {
  uint64_t vc, off;
  bool busy, fresh;
};

struct receiver {
  int dev; /* ploop_receive_device: the target, or -1 */
  uint64_t dev_bytes;
  char dir[PATH_MAX];
  bool full, made_lock;
  bool store; /* the disk is in a store other than files (rbd:) */
  bool staging; /* full: R->dir is a hidden directory renamed to final_dir at the end */
  char final_dir[PATH_MAX];
  int lock;
  struct stream_fd in;
  struct stream_header h;
  uint64_t cb, clusters;
  struct ploop_descriptor *desc;                     /* incremental: the disk's, loaded under the lock */
  char old_top[PATH_MAX];                            /* incremental: the empty top replaced at the end */
  char base_file[NAME_MAX + 1 - PLOOP_UUID_LEN - 1]; /* new deltas: "<base_file>.{uuid}" */
  struct layer layers[PLOOP_MAX_DELTAS];
  unsigned n_layers;
  char top_path[PATH_MAX];
  bool made_top;
  uint8_t *seen; /* clusters of the current layer already in the stream */
  /* The writer: DEPTH cluster buffers, each with at most one write in flight. */
  struct ploop_aio aio;
  unsigned depth;
  uint8_t *buf, *zero, *zin;
  size_t zin_cap;
  struct wslot *slot;
  uint64_t reserved; /* the current layer's file size, extended ahead of writes */
  XXH3_state_t *round;
  uint64_t round_frames, frames, data_frames, data_bytes;
  bool round_closed; /* the current layer ended with its round frame */
  ploop_progress_fn progress;
  void *opaque;
};


/* stream-receive-dir.c */
int recv_prepare_full(struct receiver *r, const char *dir);
int recv_prepare_incremental(struct receiver *r, const char *dir);
int recv_publish(struct receiver *r);
/* Removes delta PATH this receive made (a store keeps what it did not). */
void recv_remove_new(struct receiver *r, const char *path);
/* The new deltas are the disk's now (the descriptor names them). */
void recv_adopt(struct receiver *r);
void recv_undo(struct receiver *r);

#endif
