/* The C API on object-store URIs (issue 13): hlt_writer_create and hlt_reader_open take s3:// and rados:// like a
 * file name. For each URI given: write a small checkpoint, read every page back; then abandon a second save
 * (hlt_writer_abort) and check that no object became visible.
 *   capi_objstore URI... */
#include <halite/halite_c.h>
#include <stdio.h>
#include <string.h>

enum { kPages = 96 };

static void Expected(uint64_t p, unsigned char* out) {
  if (p % 4 == 0) {
    memset(out, 0, HLT_PAGE_SIZE);
    return;
  }
  for (size_t i = 0; i < HLT_PAGE_SIZE; ++i) out[i] = (unsigned char)((p * 97 + i / 32) & 0xff);
}

static int Fail(const char* uri, const char* what, int rc) {
  fprintf(stderr, "FAIL: %s: %s: %s (%s)\n", uri, what, hlt_strerror(rc), hlt_last_error());
  return 1;
}

static int Save(const char* uri, int finish) {
  hlt_writer* w;
  uint32_t region;
  unsigned char page[HLT_PAGE_SIZE];
  int rc;
  if ((rc = hlt_writer_create(uri, &w)) != 0) return Fail(uri, "hlt_writer_create", rc);
  if ((rc = hlt_writer_add_region(w, "ram", 0, kPages * HLT_PAGE_SIZE, &region)) != 0) {
    return Fail(uri, "hlt_writer_add_region", rc);
  }
  for (uint64_t p = 0; p < kPages; ++p) {
    Expected(p, page);
    if ((rc = hlt_writer_put_page(w, region, p, page)) != 0) return Fail(uri, "hlt_writer_put_page", rc);
  }
  if (!finish) {
    hlt_writer_abort(w);
    return 0;
  }
  if ((rc = hlt_writer_finish(w)) != 0) return Fail(uri, "hlt_writer_finish", rc);
  return 0;
}

static int Check(const char* uri) {
  hlt_reader* r;
  unsigned char got[HLT_PAGE_SIZE], want[HLT_PAGE_SIZE];
  int rc;
  if (Save(uri, 1)) return 1;
  if ((rc = hlt_reader_open(uri, &r)) != 0) return Fail(uri, "hlt_reader_open", rc);
  for (uint64_t p = 0; p < kPages; ++p) {
    if ((rc = hlt_reader_read_page(r, 0, p, got)) != 0) return Fail(uri, "hlt_reader_read_page", rc);
    Expected(p, want);
    if (memcmp(got, want, sizeof got) != 0) {
      fprintf(stderr, "FAIL: %s: page %llu differs\n", uri, (unsigned long long)p);
      return 1;
    }
  }
  hlt_reader_close(r);

  char abandoned[512];
  snprintf(abandoned, sizeof abandoned, "%s.abandoned", uri);
  if (Save(abandoned, 0)) return 1;
  if (hlt_reader_open(abandoned, &r) == 0) {
    fprintf(stderr, "FAIL: %s: an abandoned save left a readable object\n", abandoned);
    return 1;
  }
  printf("%s: %d pages written and read back through the C API; abandoned save left nothing (%s)\n", uri, kPages,
         hlt_last_error());
  return 0;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (Check(argv[i])) return 1;
  }
  return 0;
}
