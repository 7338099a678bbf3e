/* libxml2, loaded on first use. libploop reads DiskDescriptor.xml with
 * libxml2 only when its own subset reader (xml-mini.h) gives up, and writes
 * it with libxml2; libxml2 drags in ICU and libstdc++: linked normally, the
 * dynamic loader maps and relocates them at every start, ~5-8 ms of CPU
 * per process (LD_DEBUG=statistics), while a container's launch never
 * parses XML and an attach's ploop-nbd only reads it. So the binaries link
 * this shim instead of -lxml2 (libploop.so and the tests link the real
 * one): each entry point libploop uses forwards to the real one, resolved
 * with dlopen/dlsym the first time any is called. The types are opaque
 * here on purpose (no libxml2 headers: their declarations of the same
 * names would clash); the calls pass pointers and ints through unchanged. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *lib;

static void *sym(const char *name)
{
  if (!lib) {
    lib = dlopen("libxml2.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      fprintf(stderr, "cannot load libxml2: %s\n", dlerror());
      exit(1);
    }
  }
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "libxml2 lacks %s\n", name);
    exit(1);
  }
  return p;
}

/* One forwarding function per entry point: R NAME(ARGS) { return real(...); } */
#define FWD(ret, name, params, args)                                                 \
  ret name params;                                                                    \
  ret name params                                                                     \
  {                                                                                   \
    static ret(*real) params;                                                         \
    if (!real)                                                                        \
      *(void **)&real = sym(#name);                                                   \
    return real args;                                                                 \
  }

FWD(void *, xmlReadFile, (const char *url, const char *enc, int opts), (url, enc, opts))
FWD(void *, xmlReadMemory, (const char *buf, int size, const char *url, const char *enc, int opts),
    (buf, size, url, enc, opts))
FWD(void *, xmlDocGetRootElement, (const void *doc), (doc))
FWD(void *, xmlDocSetRootElement, (void *doc, void *root), (doc, root))
FWD(void, xmlFreeDoc, (void *doc), (doc))
FWD(void *, xmlNewChild, (void *parent, void *ns, const void *name, const void *content),
    (parent, ns, name, content))
FWD(void *, xmlNewDoc, (const void *version), (version))
FWD(void *, xmlNewNode, (void *ns, const void *name), (ns, name))
FWD(void *, xmlNewProp, (void *node, const void *name, const void *value), (node, name, value))
FWD(void *, xmlNewTextChild, (void *parent, void *ns, const void *name, const void *content),
    (parent, ns, name, content))
FWD(void *, xmlNodeGetContent, (const void *node), (node))
FWD(int, xmlStrcmp, (const void *a, const void *b), (a, b))
FWD(void, xmlDocDumpFormatMemoryEnc, (void *doc, void **txt, int *len, const char *enc, int format),
    (doc, txt, len, enc, format))

/* xmlFree is a variable (a function pointer) in libxml2, read at each call. */
static void free_lazy(void *p)
{
  void (**real)(void *) = sym("xmlFree");
  (*real)(p);
}
void (*xmlFree)(void *) = free_lazy;
