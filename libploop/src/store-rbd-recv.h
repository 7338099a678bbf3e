/* The RBD store's parts for receiving a disk (store-rbd-recv.c) and its
 * grow-ahead (store-rbd.c): called from the stream receiver and delta.c. */
#ifndef PLOOP_STORE_RBD_RECV_H
#define PLOOP_STORE_RBD_RECV_H

#include <stdbool.h>

#include "store.h"

/* The image of an open rbd delta cut back to the delta's end (it grows
 * ahead of it while written); 0 for any other store. */
int store_rbd_trim(struct store_obj *o);

/* While a receive into disk NAME runs, every image its thread creates is
 * marked with the metadata ploop.receiving=NAME (NULL: no mark). */
void rbd_recv_set_mark(const char *name);
/* Marks a new image of handle O (called by the store's create). */
int rbd_recv_mark_new(struct store_obj *o, void *img);
/* The mark taken off IMAGE of disk DIR (it is part of the disk now). */
int rbd_recv_unmark(const char *dir, const char *path);

/* Removes delta PATH of disk DIR if a receive into DIR marked it (gone: 0). */
int rbd_recv_remove_marked(const char *dir, const char *path);

/* A full receive into rbd:POOL/NAME: the disk's writer lock in *LOCK, a
 * dead local receiver's lock broken and its marked images removed; refused
 * when the disk exists or an unmarked image is in the way. */
int rbd_recv_prepare_full(const char *dir, int *lock);
/* A failed full receive: the lock object goes too (after unlock). */
void rbd_recv_forget_lock(const char *dir);

#endif
