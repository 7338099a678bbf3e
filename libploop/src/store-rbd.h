/* Shared by the RBD store's files: store-rbd.c (the store: deltas,
 * descriptor, disk lock) and store-rbd-admin.c (lock-break, whether a disk
 * exists, removing one). librados and librbd are called through pointers
 * resolved when the first rbd: disk is used (store-rbd.c, lib_load). */
#ifndef PLOOP_STORE_RBD_H
#define PLOOP_STORE_RBD_H

#include <pthread.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdbool.h>
#include <stdint.h>

#define RADOS_FUNCS(X) X(rados_create) X(rados_conf_read_file) X(rados_conf_set) X(rados_connect) X(rados_shutdown) X(rados_ioctx_create) X(rados_ioctx_destroy) X(rados_stat) X(rados_read) X(rados_write_full) X(rados_lock_exclusive) X(rados_lock_shared) X(rados_unlock) X(rados_list_lockers) X(rados_break_lock) X(rados_set_pool_full_try) X(rados_remove) X(rados_exec)
#define RBD_FUNCS(X) X(rbd_open) X(rbd_open_read_only) X(rbd_close) X(rbd_lock_acquire) X(rbd_lock_release) X(rbd_lock_get_owners) X(rbd_lock_get_owners_cleanup) X(rbd_lock_break) X(rbd_get_size) X(rbd_create4) X(rbd_image_options_create) X(rbd_image_options_set_uint64) X(rbd_image_options_destroy) X(rbd_remove) X(rbd_rename) X(rbd_read) X(rbd_write) X(rbd_resize2) X(rbd_flush) X(rbd_write_zeroes) X(rbd_aio_create_completion) X(rbd_aio_read) X(rbd_aio_write) X(rbd_aio_get_return_value) X(rbd_aio_release) X(rbd_get_id)
#define DECLARE(f) __typeof__(&f) p_##f;
struct rbd_lib {
  RADOS_FUNCS(DECLARE) RBD_FUNCS(DECLARE)
};
extern struct rbd_lib rbd_lib;
#undef DECLARE

#define rados_create (*rbd_lib.p_rados_create)
#define rados_conf_read_file (*rbd_lib.p_rados_conf_read_file)
#define rados_conf_set (*rbd_lib.p_rados_conf_set)
#define rados_connect (*rbd_lib.p_rados_connect)
#define rados_shutdown (*rbd_lib.p_rados_shutdown)
#define rados_ioctx_create (*rbd_lib.p_rados_ioctx_create)
#define rados_ioctx_destroy (*rbd_lib.p_rados_ioctx_destroy)
#define rados_stat (*rbd_lib.p_rados_stat)
#define rados_read (*rbd_lib.p_rados_read)
#define rados_write_full (*rbd_lib.p_rados_write_full)
#define rados_lock_exclusive (*rbd_lib.p_rados_lock_exclusive)
#define rados_lock_shared (*rbd_lib.p_rados_lock_shared)
#define rados_unlock (*rbd_lib.p_rados_unlock)
#define rados_list_lockers (*rbd_lib.p_rados_list_lockers)
#define rados_break_lock (*rbd_lib.p_rados_break_lock)
#define rados_remove (*rbd_lib.p_rados_remove)
#define rados_set_pool_full_try (*rbd_lib.p_rados_set_pool_full_try)
#define rados_exec (*rbd_lib.p_rados_exec)
#define rbd_open (*rbd_lib.p_rbd_open)
#define rbd_open_read_only (*rbd_lib.p_rbd_open_read_only)
#define rbd_close (*rbd_lib.p_rbd_close)
#define rbd_lock_acquire (*rbd_lib.p_rbd_lock_acquire)
#define rbd_lock_release (*rbd_lib.p_rbd_lock_release)
#define rbd_lock_get_owners (*rbd_lib.p_rbd_lock_get_owners)
#define rbd_lock_get_owners_cleanup (*rbd_lib.p_rbd_lock_get_owners_cleanup)
#define rbd_lock_break (*rbd_lib.p_rbd_lock_break)
#define rbd_get_size (*rbd_lib.p_rbd_get_size)
#define rbd_create4 (*rbd_lib.p_rbd_create4)
#define rbd_image_options_create (*rbd_lib.p_rbd_image_options_create)
#define rbd_image_options_set_uint64 (*rbd_lib.p_rbd_image_options_set_uint64)
#define rbd_image_options_destroy (*rbd_lib.p_rbd_image_options_destroy)
#define rbd_remove (*rbd_lib.p_rbd_remove)
#define rbd_rename (*rbd_lib.p_rbd_rename)
#define rbd_read (*rbd_lib.p_rbd_read)
#define rbd_write (*rbd_lib.p_rbd_write)
#define rbd_resize2 (*rbd_lib.p_rbd_resize2)
#define rbd_flush (*rbd_lib.p_rbd_flush)
#define rbd_write_zeroes (*rbd_lib.p_rbd_write_zeroes)
#define rbd_aio_create_completion (*rbd_lib.p_rbd_aio_create_completion)
#define rbd_aio_read (*rbd_lib.p_rbd_aio_read)
#define rbd_aio_write (*rbd_lib.p_rbd_aio_write)
#define rbd_aio_get_return_value (*rbd_lib.p_rbd_aio_get_return_value)
#define rbd_aio_release (*rbd_lib.p_rbd_aio_release)
#define rbd_get_id (*rbd_lib.p_rbd_get_id)

struct rbd_loc {
  char pool[128];
  char name[256]; /* the disk's NAME */
  char conf[512]; /* "" = CEPH_CONF or Ceph's default search */
};

/* "rbd:POOL/NAME[?conf=PATH]" into L; -1 with the error set. */
int rbd_parse_loc(const char *s, struct rbd_loc *l);
/* An I/O context on L's pool over the process's connection for its
 * configuration (CLUSTER, when not NULL, gets the connection). */
int rbd_connect_pool(const struct rbd_loc *l, rados_t *cluster, rados_ioctx_t *io);
/* One-line error for librados/librbd's negative errno RC. */
int rbd_fail(const char *what, const char *name, int rc);
/* The RBD image name of delta PATH of disk DIR, and DIR's location. */
int rbd_image_of(const char *dir, const char *path, struct rbd_loc *l, char *image, size_t len);
/* The descriptor object of disk DIR: an I/O context and its object id. */
int rbd_desc_open(const char *dir, rados_ioctx_t *io, char *oid, size_t len);

#define RBD_ORDER 20 /* 1 MiB objects: one default ploop cluster per object */

/* An open delta's image (store_obj.priv). */
struct rbd_obj {
  rados_ioctx_t io;
  rbd_image_t img;
  pthread_mutex_t grow; /* one resize at a time */
  uint64_t size;        /* the delta's end; under grow; read atomically */
  bool locked;
  uint64_t img_size;  /* the RBD image's size (>= size: grown ahead); under grow */
  uint64_t grow_step; /* the next grow-ahead step; under grow */
};

/* librbd calls a resize's progress function without checking it for NULL
 * when a shrink removes objects (a NULL one crashed the process). */
int rbd_no_progress(uint64_t done, uint64_t total, void *arg);
/* store-rbd-grow.c, under R->grow: the image at least END bytes (ahead of
 * it when R holds the lock); exactly BYTES. Both return 0 or -errno. */
int rbd_grow_ahead_locked(struct rbd_obj *r, uint64_t end);
int rbd_resize_exact_locked(struct rbd_obj *r, uint64_t bytes);

#endif
