/* A C consumer built with pkg-config against the installed tree. */
#include <halite/halite_c.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  hlt_writer* w;
  uint32_t region;
  unsigned char page[HLT_PAGE_SIZE], back[HLT_PAGE_SIZE];
  memset(page, 0x7a, sizeof page);
  if (hlt_writer_create(argv[1], NULL, &w) != 0) return 1;
  if (hlt_writer_add_region(w, "ram", 0, 4 * HLT_PAGE_SIZE, &region) != 0) return 1;
  if (hlt_writer_put_page(w, region, 1, page) != 0) return 1;
  if (hlt_writer_finish(w) != 0) return 1;
  hlt_reader* r;
  if (hlt_reader_open(argv[1], &r) != 0) return 1;
  int kind;
  uint32_t block, slot;
  if (hlt_reader_lookup(r, 0, 1, &kind, &block, &slot) != 0 || kind != HLT_PAGE_STORED) return 1;
  if (hlt_reader_read_page(r, 0, 1, back) != 0 || memcmp(page, back, sizeof page) != 0) return 1;
  int rc = hlt_reader_read_page(r, 0, 99, back);
  if (rc != HLT_EINVAL || strlen(hlt_last_error()) == 0) return 1;
  hlt_reader_close(r);
  if (hlt_reader_open("/nonexistent/x.hlt", &r) != HLT_EIO) return 1;
  printf("c consumer: OK (%s: %s)\n", hlt_strerror(HLT_EIO), hlt_last_error());
  return 0;
}
