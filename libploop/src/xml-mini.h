/* A reader for the subset of XML that DiskDescriptor.xml uses: ASCII
 * elements with attributes, text, an optional UTF-8 declaration. Loading
 * libxml2 (with ICU and libstdc++) costs ~5 ms of CPU at every process
 * start, and each attach starts a ploop-nbd that reads the descriptor:
 * this reader spares it. Anything else (comments, entities, CDATA, PIs,
 * DOCTYPE, namespaces, non-ASCII bytes, CR, a malformed tag) makes it give
 * up, and the caller asks libxml2, which then accepts or rejects the
 * document as before: the subset is read exactly as libxml2 reads it. */
#ifndef PLOOP_XML_MINI_H
#define PLOOP_XML_MINI_H

#include <stddef.h>

/* An element: its name, its text content as xmlNodeGetContent gives it
 * (all descendant text, concatenated), its child elements. */
struct xml_mini_node {
  char *name;
  char *content;
  struct xml_mini_node *children, *next;
};

/* The root element of TEXT, or NULL when TEXT is outside the subset. */
struct xml_mini_node *xml_mini_parse(const char *text, size_t len);
void xml_mini_free(struct xml_mini_node *n);

#endif
