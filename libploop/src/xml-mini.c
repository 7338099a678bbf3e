/* A reader for the small subset of XML that DiskDescriptor.xml uses
 * (xml-mini.h). It never judges a document: whatever it does not fully
 * understand, it hands back to libxml2, which decides. */
#include "xml-mini.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32
#define MAX_ATTRS 16

struct buf {
  char *s;
  size_t len, cap;
};

static bool buf_add(struct buf *b, const char *s, size_t n)
{
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p)
      return false;
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
  return true;
}

struct reader {
  const char *p, *end;
};

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n'; }
static bool name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9') || c == '.' || c == '-'; }

static void skip_space(struct reader *r)
{
  while (r->p < r->end && is_space(*r->p))
    r->p++;
}

/* A name of the subset (ASCII, no namespace prefix); its length or 0. */
static size_t read_name(struct reader *r)
{
  const char *s = r->p;
  if (s >= r->end || !name_start(*s))
    return 0;
  while (r->p < r->end && name_char(*r->p))
    r->p++;
  return (size_t)(r->p - s);
}

/* name S? = S? "value" (or 'value') without '<' or '&'. */
static bool read_attr(struct reader *r, const char **name, size_t *nlen, const char **val, size_t *vlen)
{
  *name = r->p;
  if (!(*nlen = read_name(r)))
    return false;
  skip_space(r);
  if (r->p >= r->end || *r->p != '=')
    return false;
  r->p++;
  skip_space(r);
  if (r->p >= r->end || (*r->p != '"' && *r->p != '\''))
    return false;
  char q = *r->p++;
  *val = r->p;
  while (r->p < r->end && *r->p != q) {
    if (*r->p == '<' || *r->p == '&')
      return false;
    r->p++;
  }
  if (r->p >= r->end)
    return false;
  *vlen = (size_t)(r->p - *val);
  r->p++;
  return true;
}

static bool is(const char *s, size_t n, const char *lit) { return n == strlen(lit) && !memcmp(s, lit, n); }

static bool is_utf8_name(const char *s, size_t n)
{
  return n == 5 && (s[0] | 0x20) == 'u' && (s[1] | 0x20) == 't' && (s[2] | 0x20) == 'f' && s[3] == '-' &&
         s[4] == '8';
}

/* <?xml version="1.0" [encoding="UTF-8"] [standalone="yes|no"] ?> */
static bool read_decl(struct reader *r)
{
  if (r->end - r->p < 6 || memcmp(r->p, "<?xml", 5) || !is_space(r->p[5]))
    return r->end - r->p < 2 || memcmp(r->p, "<?", 2);  /* another PI first: not ours */
  r->p += 5;
  static const char *const order[] = {"version", "encoding", "standalone"};
  size_t next = 0;
  for (;;) {
    bool sp = r->p < r->end && is_space(*r->p);
    skip_space(r);
    if (r->end - r->p >= 2 && !memcmp(r->p, "?>", 2)) {
      r->p += 2;
      return next > 0;
    }
    const char *n, *v;
    size_t nl, vl;
    if (!sp || !read_attr(r, &n, &nl, &v, &vl))
      return false;
    size_t k = 0;
    while (k < 3 && !is(n, nl, order[k]))
      k++;
    /* version first, then encoding and standalone, each at most once */
    if (k == 3 || k < next || (next == 0 && k != 0))
      return false;
    if ((k == 0 && !is(v, vl, "1.0")) || (k == 1 && !is_utf8_name(v, vl)) ||
        (k == 2 && !is(v, vl, "yes") && !is(v, vl, "no")))
      return false;
    next = k + 1;
  }
}

struct open_el {
  struct xml_mini_node *node;
  struct buf content;
  struct xml_mini_node **tail;
};

static struct xml_mini_node *new_node(const char *name, size_t len)
{
  struct xml_mini_node *n = calloc(1, sizeof *n);
  if (!n)
    return NULL;
  n->name = malloc(len + 1);
  if (!n->name) {
    free(n);
    return NULL;
  }
  memcpy(n->name, name, len);
  n->name[len] = 0;
  return n;
}

void xml_mini_free(struct xml_mini_node *n)
{
  while (n) {
    struct xml_mini_node *next = n->next;
    xml_mini_free(n->children);
    free(n->name);
    free(n->content);
    free(n);
    n = next;
  }
}

/* A start tag after its '<': the name, attributes (checked, dropped), and
 * whether it closes itself. */
static bool read_start_tag(struct reader *r, const char **name, size_t *nlen, bool *empty)
{
  *name = r->p;
  if (!(*nlen = read_name(r)))
    return false;
  const char *seen[MAX_ATTRS];
  size_t seen_len[MAX_ATTRS], n_seen = 0;
  for (;;) {
    bool sp = r->p < r->end && is_space(*r->p);
    skip_space(r);
    if (r->p < r->end && *r->p == '>') {
      r->p++;
      *empty = false;
      return true;
    }
    if (r->end - r->p >= 2 && !memcmp(r->p, "/>", 2)) {
      r->p += 2;
      *empty = true;
      return true;
    }
    const char *an, *v;
    size_t al, vl;
    if (!sp || n_seen == MAX_ATTRS || !read_attr(r, &an, &al, &v, &vl))
      return false;
    for (size_t i = 0; i < n_seen; i++)
      if (seen_len[i] == al && !memcmp(seen[i], an, al))
        return false;  /* a duplicate attribute: not well-formed, libxml2 says so */
    seen[n_seen] = an;
    seen_len[n_seen++] = al;
  }
}

struct xml_mini_node *xml_mini_parse(const char *text, size_t len)
{
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if ((c < 0x20 && c != '\t' && c != '\n') || c >= 0x7f)
      return NULL;  /* CR, other controls, non-ASCII: libxml2's business */
  }
  struct reader r = {text, text + len};
  if (!read_decl(&r))
    return NULL;
  skip_space(&r);
  struct open_el stack[MAX_DEPTH];
  size_t depth = 0;
  struct xml_mini_node *root = NULL;
  bool ok = false;
  while (r.p < r.end) {
    if (*r.p != '<') {
      const char *t = r.p;
      while (r.p < r.end && *r.p != '<') {
        if (*r.p == '&' || (r.end - r.p >= 3 && !memcmp(r.p, "]]>", 3)))
          goto fail;
        r.p++;
      }
      if (depth == 0) {
        /* after the root: only white space */
        for (; t < r.p; t++)
          if (!is_space(*t))
            goto fail;
        continue;
      }
      if (!buf_add(&stack[depth - 1].content, t, (size_t)(r.p - t)))
        goto fail;
      continue;
    }
    r.p++;
    if (r.p < r.end && *r.p == '/') {
      r.p++;
      const char *n = r.p;
      size_t nl = read_name(&r);
      skip_space(&r);
      if (!nl || depth == 0 || r.p >= r.end || *r.p != '>' || strlen(stack[depth - 1].node->name) != nl ||
          memcmp(stack[depth - 1].node->name, n, nl))
        goto fail;
      r.p++;
      struct open_el *e = &stack[--depth];
      e->node->content = e->content.s ? e->content.s : calloc(1, 1);
      e->content.s = NULL;
      if (!e->node->content)
        goto fail;
      if (depth > 0 && !buf_add(&stack[depth - 1].content, e->node->content, e->content.len))
        goto fail;
      if (depth == 0)
        ok = true;
      continue;
    }
    /* a start tag; comments, CDATA, PIs, DOCTYPE: not ours */
    const char *n;
    size_t nl;
    bool empty;
    if ((depth == 0 && root) || depth == MAX_DEPTH || !read_start_tag(&r, &n, &nl, &empty))
      goto fail;
    struct xml_mini_node *node = new_node(n, nl);
    if (!node)
      goto fail;
    if (depth == 0)
      root = node;
    else {
      *stack[depth - 1].tail = node;
      stack[depth - 1].tail = &node->next;
    }
    if (empty) {
      if (!(node->content = calloc(1, 1)))
        goto fail;
      if (depth == 0)
        ok = true;
      continue;
    }
    stack[depth++] = (struct open_el){.node = node, .tail = &node->children};
  }
  goto out;
fail:
  ok = false;
out:
  for (size_t i = 0; i < depth; i++)
    free(stack[i].content.s);
  if (!ok || depth || r.p < r.end) {
    xml_mini_free(root);
    return NULL;
  }
  return root;
}
