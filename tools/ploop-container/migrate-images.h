/* CRIU images over the migration connection (migrate-images.c). */
#ifndef CT_MIGRATE_IMAGES_H
#define CT_MIGRATE_IMAGES_H

#include <stdbool.h>
#include <stdint.h>

/* Sends every regular file of DIR (FILE + DATA messages). */
int mig_send_images(int fd, const char *dir, unsigned *files, uint64_t *bytes);
/* A plain file name (no '/', no leading dot, a safe alphabet). */
bool mig_image_name_ok(const char *name);
/* After a FILE message MSG: reads its DATA into a new file of DIR; *BYTES
 * (running total) must stay under MAX_BYTES. */
int mig_recv_image(int fd, const char *dir, const char *msg, uint64_t max_bytes, uint64_t *bytes);

#endif
