/* DiskDescriptor.xml: the schema OpenVZ's ploop reads and writes, parsed
 * with libxml2, validated once at load, replaced atomically on save. */
#include <fcntl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "xml-mini.h"

typedef struct xml_mini_node node_t;

static node_t *child(node_t *n, const char *name)
{
  for (node_t *c = n ? n->children : NULL; c; c = c->next)
    if (!strcmp(c->name, name))
      return c;
  return NULL;
}

/* Text of a child element, trimmed, into BUF; false if missing or too long. */
static bool child_text(node_t *n, const char *name, char *buf, size_t len)
{
  node_t *c = child(n, name);
  if (!c)
    return false;
  const char *s = c->content;
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
    s++;
  size_t l = strlen(s);
  while (l && (s[l - 1] == ' ' || s[l - 1] == '\n' || s[l - 1] == '\t' || s[l - 1] == '\r'))
    l--;
  bool ok = l < len;
  if (ok) {
    memcpy(buf, s, l);
    buf[l] = 0;
  }
  return ok;
}

static int parse_doc(struct ploop_descriptor *d, node_t *root, const char *xml);

/* libxml2's tree as the reader's: the elements, each with its content;
 * *FAILED on an allocation failure. */
static node_t *from_libxml(xmlNode *first, bool *failed)
{
  node_t *head = NULL, **tail = &head;
  for (xmlNode *x = first; x && !*failed; x = x->next) {
    if (x->type != XML_ELEMENT_NODE)
      continue;
    node_t *n = calloc(1, sizeof *n);
    if (!n) {
      *failed = true;
      break;
    }
    *tail = n;
    tail = &n->next;
    xmlChar *t = xmlNodeGetContent(x);
    n->name = strdup((const char *)x->name);
    n->content = strdup(t ? (const char *)t : "");
    xmlFree(t);
    *failed |= !n->name || !n->content;
    n->children = from_libxml(x->children, failed);
  }
  return head;
}

/* Parses the descriptor XML read from the libxml2 document DOC. */
static int parse_libxml(struct ploop_descriptor *d, xmlDoc *doc, const char *xml)
{
  xmlNode *root = xmlDocGetRootElement(doc);
  bool failed = false;
  node_t *tree = root ? from_libxml(root, &failed) : NULL;
  if (tree) {  /* the root alone, without its siblings (there are none) */
    xml_mini_free(tree->next);
    tree->next = NULL;
  }
  int rc = failed ? ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory") : parse_doc(d, tree, xml);
  xml_mini_free(tree);
  return rc;
}

/* The subset reader first; NULL when libxml2 must read TEXT. */
static int parse_mini(struct ploop_descriptor *d, const char *text, size_t len, const char *xml, bool *done)
{
  node_t *tree = xml_mini_parse(text, len);
  *done = tree != NULL;
  if (!tree)
    return 0;
  int rc = parse_doc(d, tree, xml);
  xml_mini_free(tree);
  return rc;
}

/* Up to MAX bytes of the regular file XML into *TEXT (malloc'd); -1 if it
 * could not be read whole (then libxml2 reads it, and reports). */
static int read_small_file(const char *xml, size_t max, char **text, size_t *len)
{
  int fd = open(xml, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return -1;
  struct stat st;
  char *buf = NULL;
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= max &&
      (buf = malloc((size_t)st.st_size + 1)))
    n = pread(fd, buf, (size_t)st.st_size + 1, 0);
  close(fd);
  if (n < 0 || n != st.st_size) {
    free(buf);
    return -1;
  }
  *text = buf;
  *len = (size_t)n;
  return 0;
}

static bool child_u64(node_t *n, const char *name, uint64_t *out)
{
  char buf[32], *end;
  if (!child_text(n, name, buf, sizeof buf) || !buf[0])
    return false;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 10);
  if (errno || *end || buf[0] == '-')
    return false;
  *out = v;
  return true;
}

void ploop_descriptor_free(struct ploop_descriptor *d)
{
  if (!d)
    return;
  for (size_t i = 0; i < d->n_images; i++)
    free(d->images[i].file);
  free(d->images);
  free(d->snapshots);
  free(d->dir);
  free(d);
}

struct ploop_descriptor *descriptor_new(const char *dir, uint64_t size_sectors, uint32_t cluster_sectors)
{
  struct ploop_descriptor *d = calloc(1, sizeof *d);
  if (!d || !(d->dir = ploop_strdup(dir))) {
    free(d);
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    return NULL;
  }
  d->size_sectors = size_sectors;
  d->cluster_sectors = cluster_sectors;
  ploop_chs(size_sectors, &d->cylinders, &d->heads, &d->sectors);
  snprintf(d->top_guid, sizeof d->top_guid, "%s", PLOOP_TOP_GUID);
  return d;
}

int descriptor_add_image(struct ploop_descriptor *d, const char *guid, const char *file, const char *parent)
{
  struct ploop_image_desc *im = realloc(d->images, (d->n_images + 1) * sizeof *im);
  if (!im)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  d->images = im;
  struct ploop_snapshot_desc *sh = realloc(d->snapshots, (d->n_snapshots + 1) * sizeof *sh);
  if (!sh)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  d->snapshots = sh;
  struct ploop_image_desc *i = &d->images[d->n_images];
  memset(i, 0, sizeof *i);
  snprintf(i->guid, sizeof i->guid, "%s", guid);
  if (!(i->file = ploop_strdup(file)))
    return -1;
  d->n_images++;
  struct ploop_snapshot_desc *s = &d->snapshots[d->n_snapshots++];
  memset(s, 0, sizeof *s);
  snprintf(s->guid, sizeof s->guid, "%s", guid);
  snprintf(s->parent, sizeof s->parent, "%s", parent ? parent : PLOOP_NULL_GUID);
  return 0;
}

void descriptor_remove_image(struct ploop_descriptor *d, const char *guid)
{
  for (size_t i = 0; i < d->n_images; i++)
    if (!strcmp(d->images[i].guid, guid)) {
      free(d->images[i].file);
      d->images[i] = d->images[--d->n_images];
      break;
    }
  for (size_t i = 0; i < d->n_snapshots; i++)
    if (!strcmp(d->snapshots[i].guid, guid)) {
      d->snapshots[i] = d->snapshots[--d->n_snapshots];
      break;
    }
}

struct ploop_snapshot_desc *descriptor_find_shot(struct ploop_descriptor *d, const char *guid)
{
  for (size_t i = 0; i < d->n_snapshots; i++)
    if (!strcmp(d->snapshots[i].guid, guid))
      return &d->snapshots[i];
  return NULL;
}

const struct ploop_image_desc *ploop_descriptor_find_image(const struct ploop_descriptor *d, const char *guid)
{
  for (size_t i = 0; i < d->n_images; i++)
    if (!strcmp(d->images[i].guid, guid))
      return &d->images[i];
  return NULL;
}

size_t descriptor_children(const struct ploop_descriptor *d, const char *guid, const char **first)
{
  size_t n = 0;
  for (size_t i = 0; i < d->n_snapshots; i++)
    if (!strcmp(d->snapshots[i].parent, guid)) {
      if (n == 0 && first)
        *first = d->snapshots[i].guid;
      n++;
    }
  return n;
}

struct ploop_descriptor *descriptor_dup(const struct ploop_descriptor *s)
{
  struct ploop_descriptor *d = descriptor_new(s->dir, s->size_sectors, s->cluster_sectors);
  if (!d)
    return NULL;
  d->cylinders = s->cylinders;
  d->heads = s->heads;
  d->sectors = s->sectors;
  memcpy(d->top_guid, s->top_guid, sizeof d->top_guid);
  for (size_t i = 0; i < s->n_images; i++) {
    const struct ploop_snapshot_desc *sh = NULL;
    for (size_t j = 0; j < s->n_snapshots; j++)
      if (!strcmp(s->snapshots[j].guid, s->images[i].guid))
        sh = &s->snapshots[j];
    if (descriptor_add_image(d, s->images[i].guid, s->images[i].file, sh ? sh->parent : NULL) < 0) {
      ploop_descriptor_free(d);
      return NULL;
    }
    d->images[i].plain = s->images[i].plain;
    if (sh)
      d->snapshots[d->n_snapshots - 1].temporary = sh->temporary;
  }
  return d;
}

/* A File must name a file inside the descriptor's directory: no absolute
 * path, no "..", no empty component. */
static int check_file_name(const char *xml, const char *file)
{
  if (!file[0] || file[0] == '/')
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: image path '%s' leaves the descriptor's directory",
                       xml, file);
  const char *p = file;
  while (*p) {
    const char *e = strchrnul(p, '/');
    size_t l = (size_t)(e - p);
    if (l == 2 && p[0] == '.' && p[1] == '.')
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: image path '%s' leaves the descriptor's directory",
                         xml, file);
    if (l == 0 || (l == 1 && p[0] == '.'))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: image path '%s' is not canonical", xml, file);
    p = *e ? e + 1 : e;
  }
  return 0;
}

int descriptor_resolve_file(const char *dir_or_xml, char **dir_out, char **xml_out)
{
  struct stat st;
  char buf[PATH_MAX];
  if (stat(dir_or_xml, &st) < 0)
    return ploop_error(errno == ENOENT ? PLOOP_ERR_NOTFOUND : PLOOP_ERR_IO, errno, "%s: %s", dir_or_xml,
                       strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    if (!realpath(dir_or_xml, buf))
      return ploop_error_os(dir_or_xml, "realpath");
    *dir_out = ploop_strdup(buf);
  } else {
    if (!realpath(dir_or_xml, buf))
      return ploop_error_os(dir_or_xml, "realpath");
    char *slash = strrchr(buf, '/');
    if (strcmp(slash + 1, PLOOP_DESCRIPTOR_NAME) != 0)
      return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: expected a disk directory or its %s", dir_or_xml,
                         PLOOP_DESCRIPTOR_NAME);
    *slash = 0;
    *dir_out = ploop_strdup(buf[0] ? buf : "/");
  }
  if (!*dir_out)
    return -1;
  if (asprintf(xml_out, "%s/%s", *dir_out, PLOOP_DESCRIPTOR_NAME) < 0) {
    free(*dir_out);
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  }
  return 0;
}

static int validate_structure(const struct ploop_descriptor *d);

static int parse_doc(struct ploop_descriptor *d, node_t *root, const char *xml)
{
  if (!root || (strcmp(root->name, "Parallels_disk_image") && strcmp(root->name, "Virtuozzo_disk_image")))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: not a ploop disk descriptor", xml);
  node_t *params = child(root, "Disk_Parameters");
  uint64_t v;
  if (!child_u64(params, "Disk_size", &d->size_sectors) || d->size_sectors == 0)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: missing or invalid Disk_size", xml);
  if (child_u64(params, "Cylinders", &v))
    d->cylinders = (uint32_t)v;
  if (child_u64(params, "Heads", &v))
    d->heads = (uint32_t)v;
  if (child_u64(params, "Sectors", &v))
    d->sectors = (uint32_t)v;
  node_t *storage_data = child(root, "StorageData");
  node_t *storage = child(storage_data, "Storage");
  if (!storage)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: no StorageData/Storage element", xml);
  for (node_t *s = storage->next; s; s = s->next)
    if (!strcmp(s->name, "Storage"))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: split disks (several Storage) are not supported",
                         xml);
  if (!child_u64(storage, "Blocksize", &v) || v > UINT32_MAX)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: missing or invalid Blocksize", xml);
  d->cluster_sectors = (uint32_t)v;
  for (node_t *c = storage->children; c; c = c->next) {
    if (strcmp(c->name, "Image"))
      continue;
    char guid[64], type[32] = "Compressed", file[PATH_MAX];
    if (!child_text(c, "GUID", guid, sizeof guid) || ploop_uuid_normalize(guid, guid) < 0)
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: Image with a missing or invalid GUID", xml);
    if (!child_text(c, "File", file, sizeof file))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: Image %s has no File", xml, guid);
    child_text(c, "Type", type, sizeof type);
    if (check_file_name(xml, file) < 0)
      return -1;
    if (strcmp(type, "Compressed") && strcmp(type, "Plain"))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: Image %s has unknown Type '%s'", xml, guid, type);
    if (ploop_descriptor_find_image(d, guid))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: two images with GUID %s", xml, guid);
    if (descriptor_add_image(d, guid, file, NULL) < 0)
      return -1;
    d->images[d->n_images - 1].plain = !strcmp(type, "Plain");
    d->n_snapshots--; /* shots come from the Snapshots section */
  }
  if (d->n_images == 0)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: no Image element", xml);
  node_t *snaps = child(root, "Snapshots");
  char top[64];
  if (!child_text(snaps, "TopGUID", top, sizeof top) || ploop_uuid_normalize(top, d->top_guid) < 0)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: missing or invalid Snapshots/TopGUID", xml);
  for (node_t *c = snaps->children; c; c = c->next) {
    if (strcmp(c->name, "Shot"))
      continue;
    char guid[64], parent[64];
    if (!child_text(c, "GUID", guid, sizeof guid) || ploop_uuid_normalize(guid, guid) < 0 ||
        !child_text(c, "ParentGUID", parent, sizeof parent) || ploop_uuid_normalize(parent, parent) < 0)
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: Shot with a missing or invalid GUID", xml);
    if (descriptor_find_shot(d, guid))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: two snapshots with GUID %s", xml, guid);
    struct ploop_snapshot_desc *grown = realloc(d->snapshots, (d->n_snapshots + 1) * sizeof *grown);
    if (!grown)
      return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    d->snapshots = grown;
    struct ploop_snapshot_desc *sh = &d->snapshots[d->n_snapshots++];
    memset(sh, 0, sizeof *sh);
    memcpy(sh->guid, guid, sizeof sh->guid);
    memcpy(sh->parent, parent, sizeof sh->parent);
    sh->temporary = child(c, "Temporary") != NULL;
  }
  return 0;
}

struct ploop_descriptor *ploop_descriptor_load(const char *dir_or_xml)
{
  char *dir = NULL, *xml = NULL;
  const struct store_ops *store = store_for(dir_or_xml);
  if (store->resolve(dir_or_xml, &dir, &xml) < 0)
    return NULL;
  struct ploop_descriptor *d = descriptor_new(dir, 0, 0);
  free(dir);
  if (!d) {
    free(xml);
    return NULL;
  }
  d->n_images = 0;
  struct stat xst;
  xmlDoc *doc = NULL;
  int rc;
  if (!store_is_file(store)) {
    char *text = NULL;
    size_t len = 0;
    rc = store->desc_read(d->dir, &text, &len);
    bool done = false;
    if (rc == 0)
      rc = parse_mini(d, text, len, xml, &done);
    if (rc == 0 && !done) {
      doc =
          xmlReadMemory(text, (int)len, xml, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
      rc = doc ? parse_libxml(d, doc, xml)
               : ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: not well-formed XML", xml);
      xmlFreeDoc(doc);
    }
    free(text);
    goto parsed;
  }
  /* A FIFO there would block the read forever. */
  if (stat(xml, &xst) == 0 && !S_ISREG(xst.st_mode)) {
    rc = ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: not a regular file", xml);
    goto parsed;
  }
  /* A descriptor is ~1 KiB per snapshot: bigger ones go to libxml2 whole. */
  char *text = NULL;
  size_t len = 0;
  if (read_small_file(xml, 1 << 20, &text, &len) == 0) {
    bool done = false;
    rc = parse_mini(d, text, len, xml, &done);
    free(text);
    if (done || rc < 0)
      goto parsed;
  }
  doc = xmlReadFile(xml, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc) {
    if (access(xml, F_OK) < 0)
      rc = ploop_error(PLOOP_ERR_NOTFOUND, ENOENT, "%s: no such file", xml);
    else
      rc = ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: not well-formed XML", xml);
  } else {
    rc = parse_libxml(d, doc, xml);
    xmlFreeDoc(doc);
  }
parsed:
  if (rc == 0)
    rc = validate_structure(d);
  /* Every image path must stay inside the directory, whatever the verb. */
  for (size_t i = 0; rc == 0 && i < d->n_images; i++) {
    char *path = ploop_descriptor_image_path(d, &d->images[i]);
    rc = path ? 0 : -1;
    free(path);
  }
  /* Older ploop wrote a random TopGUID; the top now always carries the fixed one. */
  if (rc == 0 && strcmp(d->top_guid, PLOOP_TOP_GUID) && !ploop_descriptor_find_image(d, PLOOP_TOP_GUID))
    descriptor_rename_guid(d, d->top_guid, PLOOP_TOP_GUID);
  free(xml);
  if (rc < 0) {
    ploop_descriptor_free(d);
    return NULL;
  }
  return d;
}

void descriptor_rename_guid(struct ploop_descriptor *d, const char *from, const char *to)
{
  char f[PLOOP_UUID_LEN + 1];
  snprintf(f, sizeof f, "%s", from); /* FROM may point into D */
  for (size_t i = 0; i < d->n_images; i++)
    if (!strcmp(d->images[i].guid, f))
      snprintf(d->images[i].guid, sizeof d->images[i].guid, "%s", to);
  for (size_t i = 0; i < d->n_snapshots; i++) {
    if (!strcmp(d->snapshots[i].guid, f))
      snprintf(d->snapshots[i].guid, sizeof d->snapshots[i].guid, "%s", to);
    if (!strcmp(d->snapshots[i].parent, f))
      snprintf(d->snapshots[i].parent, sizeof d->snapshots[i].parent, "%s", to);
  }
  if (!strcmp(d->top_guid, f))
    snprintf(d->top_guid, sizeof d->top_guid, "%s", to);
}

int ploop_descriptor_validate(const struct ploop_descriptor *d)
{
  if (validate_structure(d) < 0)
    return -1;
  for (size_t i = 0; i < d->n_images; i++) {
    char *path = ploop_descriptor_image_path(d, &d->images[i]);
    if (!path)
      return -1;
    /* (A store without files finds a missing image at its open.) */
    int ok = store_is_file(store_for(d->dir)) ? access(path, F_OK) : 0;
    if (ok < 0)
      ploop_error(PLOOP_ERR_NOTFOUND, ENOENT, "%s: image file of %s is missing", path, d->images[i].guid);
    free(path);
    if (ok < 0)
      return -1;
  }
  return 0;
}

static int validate_structure(const struct ploop_descriptor *d)
{
  const char *x = PLOOP_DESCRIPTOR_NAME;
  uint32_t cs = d->cluster_sectors;
  if (!is_pow2(cs) || cs < PLOOP_MIN_CLUSTER_SECTORS || cs > PLOOP_MAX_CLUSTER_SECTORS)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: invalid Blocksize %u", d->dir, x, cs);
  if (d->size_sectors == 0 || d->size_sectors * 512 > PLOOP_MAX_VIRTUAL_BYTES)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: invalid Disk_size %llu", d->dir, x,
                       (unsigned long long)d->size_sectors);
  if (d->n_images > PLOOP_MAX_DELTAS)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: more than %u images", d->dir, x, PLOOP_MAX_DELTAS);
  for (size_t i = 0; i < d->n_images; i++) {
    if (check_file_name(x, d->images[i].file) < 0)
      return ploop_error_wrap("%s", d->dir);
    if (!descriptor_find_shot((struct ploop_descriptor *)d, d->images[i].guid))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: image %s has no Shot entry", d->dir, x,
                         d->images[i].guid);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(d->images[i].file, d->images[j].file))
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: file %s used by two images", d->dir, x,
                           d->images[i].file);
  }
  for (size_t i = 0; i < d->n_snapshots; i++) {
    const struct ploop_snapshot_desc *s = &d->snapshots[i];
    if (!ploop_descriptor_find_image(d, s->guid))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: snapshot %s has no image", d->dir, x, s->guid);
    if (strcmp(s->parent, PLOOP_NULL_GUID) && !ploop_descriptor_find_image(d, s->parent))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: snapshot %s has a missing parent %s", d->dir, x,
                         s->guid, s->parent);
    /* Walk up: more steps than images means a cycle. */
    const char *g = s->guid;
    size_t steps = 0;
    while (strcmp(g, PLOOP_NULL_GUID)) {
      const struct ploop_snapshot_desc *p = descriptor_find_shot((struct ploop_descriptor *)d, g);
      if (!p)
        break;
      if (++steps > d->n_snapshots)
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: snapshot parents form a cycle at %s", d->dir, x,
                           s->guid);
      g = p->parent;
    }
  }
  size_t bases = 0;
  for (size_t i = 0; i < d->n_snapshots; i++)
    bases += !strcmp(d->snapshots[i].parent, PLOOP_NULL_GUID);
  if (bases != 1)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: %zu base images (expected exactly one)", d->dir, x,
                       bases);
  if (!ploop_descriptor_find_image(d, d->top_guid))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: TopGUID %s names no image", d->dir, x, d->top_guid);
  for (size_t i = 0; i < d->n_images; i++)
    if (d->images[i].plain &&
        strcmp(descriptor_find_shot((struct ploop_descriptor *)d, d->images[i].guid)->parent,
               PLOOP_NULL_GUID))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s/%s: a raw (Plain) image can only be the base", d->dir,
                         x);
  return 0;
}

int ploop_descriptor_chain(const struct ploop_descriptor *d, const char *guid, size_t *idx, size_t max)
{
  const char *g = guid ? guid : d->top_guid;
  size_t n = 0;
  size_t tmp[PLOOP_MAX_DELTAS];
  while (strcmp(g, PLOOP_NULL_GUID)) {
    const struct ploop_image_desc *im = ploop_descriptor_find_image(d, g);
    const struct ploop_snapshot_desc *s = descriptor_find_shot((struct ploop_descriptor *)d, g);
    if (!im || !s)
      return ploop_error(PLOOP_ERR_NOSNAP, ENOENT, "%s: no snapshot %s", d->dir, g);
    if (n >= PLOOP_MAX_DELTAS)
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: snapshot chain too long", d->dir);
    tmp[n++] = (size_t)(im - d->images);
    g = s->parent;
  }
  if (n > max)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "chain of %zu deltas exceeds %zu", n, max);
  for (size_t i = 0; i < n; i++) /* base first */
    idx[i] = tmp[n - 1 - i];
  return (int)n;
}

char *ploop_descriptor_image_path(const struct ploop_descriptor *d, const struct ploop_image_desc *img)
{
  char *p;
  if (asprintf(&p, "%s/%s", d->dir, img->file) < 0) {
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    return NULL;
  }
  /* Refused early for every caller; the opens resolve beneath again. */
  if (store_is_file(store_for(d->dir)) && ploop_check_file_beneath(d->dir, p) < 0) {
    free(p);
    return NULL;
  }
  return p;
}

static void add_text(xmlNode *parent, const char *name, const char *text)
{
  xmlNewTextChild(parent, NULL, (const xmlChar *)name, (const xmlChar *)text);
}

static void add_u64(xmlNode *parent, const char *name, uint64_t v)
{
  char buf[32];
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
  add_text(parent, name, buf);
}

/* The descriptor as XML text (xmlFree it). */
static int descriptor_serialize(const struct ploop_descriptor *d, xmlChar **mem_out, int *len_out)
{
  xmlDoc *doc = xmlNewDoc((const xmlChar *)"1.0");
  xmlNode *root = xmlNewNode(NULL, (const xmlChar *)"Parallels_disk_image");
  xmlNewProp(root, (const xmlChar *)"Version", (const xmlChar *)"1.0");
  xmlDocSetRootElement(doc, root);
  xmlNode *params = xmlNewChild(root, NULL, (const xmlChar *)"Disk_Parameters", NULL);
  add_u64(params, "Disk_size", d->size_sectors);
  add_u64(params, "Cylinders", d->cylinders);
  add_u64(params, "Heads", d->heads);
  add_u64(params, "Sectors", d->sectors);
  add_u64(params, "Padding", 0);
  xmlNode *sd = xmlNewChild(root, NULL, (const xmlChar *)"StorageData", NULL);
  xmlNode *st = xmlNewChild(sd, NULL, (const xmlChar *)"Storage", NULL);
  add_u64(st, "Start", 0);
  add_u64(st, "End", d->size_sectors);
  add_u64(st, "Blocksize", d->cluster_sectors);
  /* Images base first, as ploop writes them. */
  size_t order[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(d, NULL, order, PLOOP_MAX_DELTAS);
  bool written[PLOOP_MAX_DELTAS] = {0};
  for (int k = 0; k <= n; k++) {
    for (size_t i = 0; i < d->n_images; i++) {
      bool in_chain_pos = k < n && order[k] == i;
      bool rest = k == n && !written[i];
      if (!in_chain_pos && !rest)
        continue;
      written[i] = true;
      xmlNode *im = xmlNewChild(st, NULL, (const xmlChar *)"Image", NULL);
      add_text(im, "GUID", d->images[i].guid);
      add_text(im, "Type", d->images[i].plain ? "Plain" : "Compressed");
      add_text(im, "File", d->images[i].file);
    }
  }
  xmlNode *snaps = xmlNewChild(root, NULL, (const xmlChar *)"Snapshots", NULL);
  add_text(snaps, "TopGUID", d->top_guid);
  for (size_t i = 0; i < d->n_snapshots; i++) {
    xmlNode *s = xmlNewChild(snaps, NULL, (const xmlChar *)"Shot", NULL);
    add_text(s, "GUID", d->snapshots[i].guid);
    add_text(s, "ParentGUID", d->snapshots[i].parent);
    if (d->snapshots[i].temporary)
      xmlNewChild(s, NULL, (const xmlChar *)"Temporary", NULL);
  }
  xmlChar *mem = NULL;
  int len = 0;
  xmlDocDumpFormatMemoryEnc(doc, &mem, &len, "UTF-8", 1);
  xmlFreeDoc(doc);
  if (!mem)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  *mem_out = mem;
  *len_out = len;
  return 0;
}

int descriptor_write_tmp(const struct ploop_descriptor *d, int *tmp_fd)
{
  *tmp_fd = -1;
  /* A store that replaces the descriptor itself does it all at commit. */
  if (!store_is_file(store_for(d->dir))) {
    *tmp_fd = DESCRIPTOR_TMP_STORE;
    return 0;
  }
  xmlChar *mem = NULL;
  int len = 0;
  if (descriptor_serialize(d, &mem, &len) < 0)
    return -1;
  char tmp[4096];
  int rc = -1;
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", d->dir, PLOOP_DESCRIPTOR_NAME);
  /* A fresh file, never whatever a stale name points to (a symlink there
   * would carry the write outside the directory). */
  if (unlink(tmp) < 0 && errno != ENOENT) {
    ploop_error_os(tmp, "remove stale");
    goto out;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    ploop_error_os(tmp, "create");
    goto out;
  }
  if (write(fd, mem, (size_t)len) != len) {
    ploop_error_os(tmp, "write");
    close(fd);
    unlink(tmp);
    goto out;
  }
  *tmp_fd = fd;
  rc = 0;
out:
  xmlFree(mem);
  return rc;
}

int descriptor_commit_tmp(const struct ploop_descriptor *d, int tmp_fd, bool synced)
{
  if (tmp_fd == DESCRIPTOR_TMP_STORE) {
    xmlChar *mem = NULL;
    int len = 0;
    if (descriptor_serialize(d, &mem, &len) < 0)
      return -1;
    int rc = store_for(d->dir)->desc_replace(d->dir, (const char *)mem, (size_t)len);
    xmlFree(mem);
    if (rc == 0)
      ploop_fault_point("descriptor-committed");
    return rc;
  }
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", d->dir, PLOOP_DESCRIPTOR_NAME);
  snprintf(path, sizeof path, "%s/%s", d->dir, PLOOP_DESCRIPTOR_NAME);
  int rc = 0;
  if (!synced && fsync(tmp_fd) < 0)
    rc = ploop_error_os(tmp, "fsync");
  close(tmp_fd);
  if (rc == 0 && rename(tmp, path) < 0)
    rc = ploop_error_os(path, "rename");
  if (rc < 0) {
    unlink(tmp);
    return -1;
  }
  ploop_fault_point("descriptor-renamed");
  if (ploop_fsync_dir(d->dir) < 0)
    return -1;
  ploop_fault_point("descriptor-committed");
  return 0;
}

void descriptor_abort_tmp(const struct ploop_descriptor *d, int tmp_fd)
{
  if (tmp_fd == DESCRIPTOR_TMP_STORE)
    return;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", d->dir, PLOOP_DESCRIPTOR_NAME);
  close(tmp_fd);
  unlink(tmp);
}

int ploop_descriptor_save(const struct ploop_descriptor *d)
{
  int fd;
  if (descriptor_write_tmp(d, &fd) < 0)
    return -1;
  return descriptor_commit_tmp(d, fd, false);
}
