/* Filling a fresh root filesystem: a busybox userland, or a tarball
 * extracted without ever writing outside the root. */
#ifndef CT_FILL_H
#define CT_FILL_H

/* Static busybox (Debian's busybox-static), its applet links, /etc basics. */
int fill_busybox(const char *root);
/* ROOTFS.tar or .tar.gz; refuses absolute and '..' member names, links
 * pointing outside the root, and members reached through a symlink. */
int fill_tar(const char *root, const char *tarball);

#endif
