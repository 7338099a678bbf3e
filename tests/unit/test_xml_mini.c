/* Unit tests for the descriptor's subset XML reader (xml-mini.h): what it
 * accepts it reads exactly as libxml2 does (checked against libxml2 on each
 * document), and everything outside the subset is handed back (NULL). */
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "helpers.h"
#include "xml-mini.h"

TestSuite(xml_mini, .init = tmpdir_setup, .fini = tmpdir_teardown);

/* The reader's tree equals libxml2's: same elements, same contents. */
static void same_tree(const struct xml_mini_node *m, xmlNode *x)
{
  for (; x; x = x->next) {
    if (x->type != XML_ELEMENT_NODE)
      continue;
    cr_assert(m, "libxml2 has an element <%s> the reader lacks", (const char *)x->name);
    cr_assert_str_eq(m->name, (const char *)x->name);
    xmlChar *t = xmlNodeGetContent(x);
    cr_assert_str_eq(m->content, t ? (const char *)t : "", "content of <%s>", m->name);
    xmlFree(t);
    same_tree(m->children, x->children);
    m = m->next;
  }
  cr_assert_null(m, "the reader has an element <%s> libxml2 lacks", m ? m->name : "");
}

static void accepted(const char *doc)
{
  struct xml_mini_node *m = xml_mini_parse(doc, strlen(doc));
  cr_assert(m, "not read: %s", doc);
  xmlDoc *x = xmlReadMemory(doc, (int)strlen(doc), "t.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR |
                                                                   XML_PARSE_NOWARNING);
  cr_assert(x, "libxml2 rejects what the reader took: %s", doc);
  same_tree(m, xmlDocGetRootElement(x));
  xmlFreeDoc(x);
  xml_mini_free(m);
}

static void handed_back(const char *doc, size_t len)
{
  struct xml_mini_node *m = xml_mini_parse(doc, len);
  cr_assert_null(m, "read what is outside the subset: %s", doc);
}
#define HANDED_BACK(doc) handed_back(doc, strlen(doc))

Test(xml_mini, reads_what_libxml2_reads)
{
  accepted("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Parallels_disk_image Version=\"1.0\">\n"
           "  <Disk_Parameters>\n    <Disk_size>524288</Disk_size>\n  </Disk_Parameters>\n"
           "  <Snapshots>\n    <TopGUID>{5fbaabe3-6958-40ff-92a7-860e329aab41}</TopGUID>\n"
           "    <Shot><GUID>{5fbaabe3-6958-40ff-92a7-860e329aab41}</GUID><Temporary/></Shot>\n"
           "  </Snapshots>\n</Parallels_disk_image>\n");
  accepted("<a/>");
  accepted("<a></a>\n\n");
  accepted("<?xml version='1.0' encoding='utf-8' standalone='yes'?><a b='1' c = \"2\">x</a>");
  accepted("<?xml version=\"1.0\"?>\n<a>x<b>y<c>z</c></b>w<d/>v</a>");
  accepted("<a>2 > 1</a>");
  accepted("<a-b.c_d><e9>\t text \t</e9></a-b.c_d>");
}

Test(xml_mini, hands_back_what_it_does_not_cover)
{
  HANDED_BACK("");
  HANDED_BACK("   ");
  HANDED_BACK("<a><!-- note --></a>");
  HANDED_BACK("<a>&amp;</a>");
  HANDED_BACK("<a>&#65;</a>");
  HANDED_BACK("<a><![CDATA[x]]></a>");
  HANDED_BACK("<!DOCTYPE a><a/>");
  HANDED_BACK("<?xml version=\"1.0\"?><?pi x?><a/>");
  HANDED_BACK("<?xml-stylesheet href=\"x\"?><a/>");
  HANDED_BACK("<a>x\r\n</a>");
  HANDED_BACK("<a>\xc3\xa9</a>");
  HANDED_BACK("\xef\xbb\xbf<a/>");
  HANDED_BACK("<a:b xmlns:a=\"u\"/>");
  HANDED_BACK("<a>]]></a>");
  HANDED_BACK("<a b=\"<\"/>");
  HANDED_BACK("<a b=\"&lt;\"/>");
  HANDED_BACK("<?xml version=\"1.1\"?><a/>");
  HANDED_BACK("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><a/>");
  HANDED_BACK("<?xml encoding=\"UTF-8\" version=\"1.0\"?><a/>");
  HANDED_BACK("<?xml encoding=\"UTF-8\"?><a/>");
  HANDED_BACK("<?xml version=\"1.0\" version=\"1.0\"?><a/>");
  HANDED_BACK("<?xml version=\"1.0\"standalone=\"yes\"?><a/>");
  HANDED_BACK(" <?xml version=\"1.0\"?><a/>");
  handed_back("<a>\0</a>", 8);
}

Test(xml_mini, hands_back_what_is_not_well_formed)
{
  HANDED_BACK("<a>");
  HANDED_BACK("<a></b>");
  HANDED_BACK("<a><b></a></b>");
  HANDED_BACK("<a/><b/>");
  HANDED_BACK("<a/>text");
  HANDED_BACK("text<a/>");
  HANDED_BACK("</a>");
  HANDED_BACK("<a b=\"1\" b=\"2\"/>");
  HANDED_BACK("<a b=\"1\"c=\"2\"/>");
  HANDED_BACK("<a b/>");
  HANDED_BACK("<a b=1/>");
  HANDED_BACK("<1a/>");
  HANDED_BACK("<a></a >x");
  HANDED_BACK("<a><b></b>");
  /* Deeper than the reader goes: libxml2 decides. */
  char deep[400] = "", *p = deep;
  for (int i = 0; i < 40; i++)
    p += sprintf(p, "<a>");
  for (int i = 0; i < 40; i++)
    p += sprintf(p, "</a>");
  HANDED_BACK(deep);
}

/* Mutations of a descriptor (characters replaced, inserted, dropped): every
 * one the reader takes, libxml2 takes too and reads the same. */
Test(xml_mini, mutated_documents_read_as_libxml2_reads_them)
{
  static const char base[] =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Parallels_disk_image Version=\"1.0\">\n"
      "  <Disk_Parameters>\n    <Disk_size>524288</Disk_size>\n  </Disk_Parameters>\n"
      "  <StorageData><Storage><Image><GUID>{5fbaabe3}</GUID><File>root.hds</File></Image>"
      "</Storage></StorageData>\n  <Snapshots><Shot a='1' b=\"2\"/></Snapshots>\n"
      "</Parallels_disk_image>\n";
  static const char alpha[] = "<>/=\"' \t\nabc?!-&;]x1\r";
  uint32_t seed = 12345;
  unsigned taken = 0;
  for (int it = 0; it < 20000; it++) {
    char buf[sizeof base + 8];
    size_t len = sizeof base - 1;
    memcpy(buf, base, len);
    for (int k = 0, muts = 1 + it % 3; k < muts; k++) {
      seed = seed * 1103515245u + 12345u;
      size_t pos = (seed >> 8) % len;
      char c = alpha[(seed >> 20) % (sizeof alpha - 1)];
      switch ((seed >> 4) % 3) {
      case 0: buf[pos] = c; break;
      case 1:
        if (len < sizeof buf) {
          memmove(buf + pos + 1, buf + pos, len - pos);
          buf[pos] = c;
          len++;
        }
        break;
      default: memmove(buf + pos, buf + pos + 1, len - pos - 1); len--;
      }
    }
    struct xml_mini_node *m = xml_mini_parse(buf, len);
    if (!m)
      continue;
    taken++;
    xmlDoc *x = xmlReadMemory(buf, (int)len, "t.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR |
                                                              XML_PARSE_NOWARNING);
    cr_assert(x, "libxml2 rejects what the reader took: %.*s", (int)len, buf);
    same_tree(m, xmlDocGetRootElement(x));
    xmlFreeDoc(x);
    xml_mini_free(m);
  }
  cr_assert_gt(taken, 1000, "the mutations left too few documents inside the subset: %u", taken);
}

/* A descriptor outside the subset still loads (through libxml2), the same. */
Test(xml_mini, descriptor_outside_the_subset_loads_the_same)
{
  struct ploop_delta_create_params p = {.size_bytes = 64 << 20};
  cr_assert_eq(ploop_disk_create(tpath("root.hds"), &p), 0, "%s", ploop_get_error());
  struct ploop_descriptor *a = ploop_descriptor_load(tpath(""));
  cr_assert(a, "%s", ploop_get_error());
  char text[8192] = "";
  FILE *f = fopen(tpath("DiskDescriptor.xml"), "r");
  cr_assert(f);
  cr_assert_gt(fread(text, 1, sizeof text - 1, f), 0);
  fclose(f);
  char *root = strstr(text, "<Parallels_disk_image");
  cr_assert(root);
  char *mod = NULL;
  cr_assert(asprintf(&mod, "%.*s<!-- edited by hand -->\r\n%s", (int)(root - text), text, root) > 0);
  write_text(tpath("DiskDescriptor.xml"), mod);
  struct ploop_descriptor *b = ploop_descriptor_load(tpath(""));
  cr_assert(b, "%s", ploop_get_error());
  cr_assert_eq(a->size_sectors, b->size_sectors);
  cr_assert_eq(a->cluster_sectors, b->cluster_sectors);
  cr_assert_eq(a->n_images, b->n_images);
  cr_assert_str_eq(a->top_guid, b->top_guid);
  cr_assert_str_eq(a->images[0].file, b->images[0].file);
  cr_assert_str_eq(a->images[0].guid, b->images[0].guid);
  ploop_descriptor_free(a);
  ploop_descriptor_free(b);
  free(mod);
}
