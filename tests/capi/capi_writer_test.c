/* The C writer's setters (issue 25: no public struct), its statistics, hlt-save raw and incremental saves.
 * Compiled as C99 and linked to libhalite.so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_test_util.h"
#include "halite/halite_c.h"

enum { kPages = 64 };

/* Options: each checked, refused with a message naming it, and refused once a region exists. */
static void Setters(const char* dir) {
  hlt_writer* w;
  ExpectRc(hlt_writer_create(PathIn(dir, "never.hlt"), &w), HLT_OK, "hlt_writer_create");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_BLOCK_PAGES, 0), HLT_EINVAL, "block pages 0");
  ExpectLastErrorHas("HLT_WRITER_BLOCK_PAGES", "block pages 0");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_BLOCK_PAGES, 4097), HLT_EINVAL, "block pages 4097");
  ExpectRc(hlt_writer_set_param(w, (hlt_writer_param)999, 1), HLT_EINVAL, "an unknown parameter");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_PAGE_HASHES, 2), HLT_EINVAL, "a flag of 2");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_POLICY, "sideways"), HLT_EINVAL, "policy sideways");
  ExpectLastErrorHas("sideways", "policy sideways");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_DICTIONARY, "maybe"), HLT_EINVAL, "dictionary maybe");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_MAC_KEY_FILE, PathIn(dir, "no-such-key")), HLT_EIO, "a missing key");
  ExpectLastErrorHas("no-such-key", "a missing key file is named");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_POLICY, "physical"), HLT_OK, "policy physical");
  uint32_t region;
  ExpectRc(hlt_writer_add_region(w, "ram", 0, 4 * HLT_PAGE_SIZE, &region), HLT_OK, "add_region");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_LEVEL, 5), HLT_EINVAL, "a parameter after the first region");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_CREATOR, "x"), HLT_EINVAL, "a string after the first region");
  uint64_t v;
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_PAGES, &v), HLT_EINVAL, "a statistic before commit");
  hlt_writer_abort(w);
  FILE* f = fopen(PathIn(dir, "never.hlt"), "rb");
  Expect(f == NULL, "an aborted writer leaves no file");
}

/* 64 pages: 0..7 zero, 9 absent, 10 a copy of 11, the rest distinct; block_pages 4. */
static void SaveFlat(const char* path, uint64_t* blocks) {
  hlt_writer* w;
  unsigned char page[HLT_PAGE_SIZE];
  uint32_t region;
  ExpectRc(hlt_writer_create(path, &w), HLT_OK, "create flat");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_BLOCK_PAGES, 4), HLT_OK, "block pages 4");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_PAGE_HASHES, 1), HLT_OK, "page hashes");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_VMM_KIND, 3), HLT_OK, "vmm kind");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_VMM_KIND, 4), HLT_EINVAL, "vmm kind 4");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_MACHINE_TYPE, "pc-q35-test"), HLT_OK, "machine type");
  ExpectRc(hlt_writer_add_region(w, "ram", 0, kPages * HLT_PAGE_SIZE, &region), HLT_OK, "add_region");
  ExpectRc(hlt_writer_put_zero_pages(w, region, 0, 8), HLT_OK, "zero pages");
  for (uint64_t p = 8; p < kPages; ++p) {
    if (p == 9) continue;
    FillPage(p == 10 ? 11 : p, 1, page);
    ExpectRc(hlt_writer_put_page(w, region, p, page), HLT_OK, "put_page");
  }
  ExpectRc(hlt_writer_add_blob(w, "device.state", "state", 5), HLT_OK, "add_blob");
  ExpectRc(hlt_writer_commit(w), HLT_OK, "commit");
  uint64_t v;
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_PAGES, &v), HLT_OK, "stat pages");
  Expect(v == kPages, "64 pages");
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_ZERO_PAGES, &v), HLT_OK, "stat zero");
  Expect(v == 8, "8 zero pages");
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_ABSENT_PAGES, &v), HLT_OK, "stat absent");
  Expect(v == 1, "1 absent page");
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_DUPLICATE_PAGES, &v), HLT_OK, "stat duplicates");
  Expect(v == 1, "1 duplicate page");
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_STORED_PAGES, &v), HLT_OK, "stat stored");
  Expect(v == kPages - 8 - 1 - 1, "54 distinct stored pages");
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_BLOCKS, blocks), HLT_OK, "stat blocks");
  Expect(*blocks == 14, "54 pages in blocks of 4 make 14 blocks");
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_FILE_BYTES, &v), HLT_OK, "stat file bytes");
  Expect(v > 54 * HLT_PAGE_SIZE, "random pages do not compress");
  ExpectRc(hlt_writer_get_stat(w, (hlt_writer_stat)999, &v), HLT_EINVAL, "an unknown statistic");
  ExpectRc(hlt_writer_commit(w), HLT_EINVAL, "a second commit");
  hlt_writer_free(w);
}

/* hlt-save raw: an image file as region "ram", read back page for page. */
static void SaveRaw(const char* dir) {
  enum { kRawPages = 24 };
  unsigned char* image = malloc(kRawPages * HLT_PAGE_SIZE);
  unsigned char got[HLT_PAGE_SIZE];
  Expect(image != NULL, "malloc");
  for (uint64_t p = 0; p < kRawPages; ++p) FillPage(p, 7, image + p * HLT_PAGE_SIZE);
  memset(image + 5 * HLT_PAGE_SIZE, 0, HLT_PAGE_SIZE);
  WriteFile(PathIn(dir, "raw.img"), image, kRawPages * HLT_PAGE_SIZE);
  WriteFile(PathIn(dir, "odd.img"), image, HLT_PAGE_SIZE - 1);

  hlt_writer* w;
  uint32_t region = 99;
  ExpectRc(hlt_writer_create(PathIn(dir, "raw.hlt"), &w), HLT_OK, "create raw");
  ExpectRc(hlt_writer_add_raw_image(w, PathIn(dir, "odd.img"), &region), HLT_EINVAL, "an image of 4095 bytes");
  ExpectLastErrorHas("odd.img", "the odd image is named");
  ExpectRc(hlt_writer_add_raw_image(w, PathIn(dir, "raw.img"), &region), HLT_OK, "add_raw_image");
  Expect(region == 0, "region 0");
  ExpectRc(hlt_writer_commit(w), HLT_OK, "commit raw");
  uint64_t zero;
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_ZERO_PAGES, &zero), HLT_OK, "raw zero pages");
  Expect(zero == 1, "the raw image's zero page is found");
  hlt_writer_free(w);

  hlt_reader* r;
  ExpectRc(hlt_reader_open(PathIn(dir, "raw.hlt"), &r), HLT_OK, "open raw");
  const char* name;
  uint64_t base, size;
  ExpectRc(hlt_reader_region(r, 0, &name, &base, &size), HLT_OK, "raw region");
  Expect(strcmp(name, "ram") == 0 && base == 0 && size == kRawPages * HLT_PAGE_SIZE, "region ram of the image size");
  for (uint64_t p = 0; p < kRawPages; ++p) {
    ExpectRc(hlt_reader_read_page(r, 0, p, got), HLT_OK, "read raw page");
    Expect(memcmp(got, image + p * HLT_PAGE_SIZE, HLT_PAGE_SIZE) == 0, "a raw page reads back as it was");
  }
  hlt_reader_close(r);
  free(image);
}

/* An incremental save (HLT_WRITER_PARENT): unchanged pages become references into the parent. */
static void SaveChild(const char* dir) {
  hlt_writer* w;
  unsigned char page[HLT_PAGE_SIZE];
  uint32_t region;
  ExpectRc(hlt_writer_create(PathIn(dir, "child.hlt"), &w), HLT_OK, "create child");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_PARENT, PathIn(dir, "child.hlt")), HLT_OK, "parent");
  ExpectRc(hlt_writer_add_region(w, "ram", 0, kPages * HLT_PAGE_SIZE, &region), HLT_EINVAL, "its own parent");
  ExpectLastErrorHas("cannot be its own parent", "its own parent");
  hlt_writer_free(w);

  ExpectRc(hlt_writer_create(PathIn(dir, "child.hlt"), &w), HLT_OK, "create child");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_BLOCK_PAGES, 4), HLT_OK, "child block pages");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_PARENT, PathIn(dir, "flat.hlt")), HLT_OK, "parent");
  ExpectRc(hlt_writer_add_region(w, "ram", 0, kPages * HLT_PAGE_SIZE, &region), HLT_OK, "child region");
  ExpectRc(hlt_writer_put_zero_pages(w, region, 0, 8), HLT_OK, "child zero pages");
  for (uint64_t p = 8; p < kPages; ++p) {
    if (p == 9) continue;
    FillPage(p == 10 ? 11 : p, p >= 60 ? 2 : 1, page); /* pages 60..63 changed */
    ExpectRc(hlt_writer_put_page(w, region, p, page), HLT_OK, "child put_page");
  }
  ExpectRc(hlt_writer_commit(w), HLT_OK, "commit child");
  uint64_t in_parent;
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_IN_PARENT_PAGES, &in_parent), HLT_OK, "in parent");
  printf("child: %llu pages in the parent\n", (unsigned long long)in_parent);
  Expect(in_parent >= 50 && in_parent <= 60, "the unchanged pages are references into the parent");
  hlt_writer_free(w);
}

/* An encrypted save with a key file; a MAC-authenticated one. */
static void SaveKeyed(const char* dir) {
  const char* hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
  WriteFile(PathIn(dir, "enc.key"), hex, strlen(hex));
  hlt_writer* w;
  unsigned char page[HLT_PAGE_SIZE];
  uint32_t region;
  ExpectRc(hlt_writer_create(PathIn(dir, "enc.hlt"), &w), HLT_OK, "create encrypted");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_ENCRYPT_KEY_FILE, PathIn(dir, "enc.key")), HLT_OK, "key file");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_CIPHER, HLT_CIPHER_XCHACHA20POLY1305), HLT_OK, "cipher");
  ExpectRc(hlt_writer_add_region(w, "ram", 0, 8 * HLT_PAGE_SIZE, &region), HLT_OK, "enc region");
  for (uint64_t p = 0; p < 8; ++p) {
    FillPage(p, 3, page);
    ExpectRc(hlt_writer_put_page(w, region, p, page), HLT_OK, "enc put_page");
  }
  ExpectRc(hlt_writer_commit(w), HLT_OK, "commit encrypted");
  uint64_t enc;
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_ENCRYPTED, &enc), HLT_OK, "stat encrypted");
  Expect(enc == 1, "the checkpoint is encrypted");
  hlt_writer_free(w);

  WriteFile(PathIn(dir, "mac.key"), hex, strlen(hex));
  ExpectRc(hlt_writer_create(PathIn(dir, "mac.hlt"), &w), HLT_OK, "create mac");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_MAC_KEY_FILE, PathIn(dir, "mac.key")), HLT_OK, "mac key file");
  ExpectRc(hlt_writer_add_region(w, "ram", 0, 8 * HLT_PAGE_SIZE, &region), HLT_OK, "mac region");
  FillPage(0, 4, page);
  ExpectRc(hlt_writer_put_page(w, region, 0, page), HLT_OK, "mac put_page");
  ExpectRc(hlt_writer_finish(w), HLT_OK, "finish mac");
}

int main(void) {
  const char* dir = ScratchDir();
  Setters(dir);
  uint64_t blocks = 0;
  SaveFlat(PathIn(dir, "flat.hlt"), &blocks);
  hlt_reader* r;
  uint64_t v;
  ExpectRc(hlt_reader_open(PathIn(dir, "flat.hlt"), &r), HLT_OK, "open flat");
  ExpectRc(hlt_reader_get_info(r, HLT_INFO_BLOCKS, &v), HLT_OK, "info blocks");
  Expect(v == blocks, "the reader counts the blocks the writer wrote");
  ExpectRc(hlt_reader_get_info(r, HLT_INFO_PAGE_HASHES, &v), HLT_OK, "info page hashes");
  Expect(v == 1, "HLT_WRITER_PAGE_HASHES wrote PAGE_HASHES");
  ExpectRc(hlt_reader_get_info(r, HLT_INFO_VMM_KIND, &v), HLT_OK, "info vmm kind");
  Expect(v == 3, "HLT_WRITER_VMM_KIND recorded");
  hlt_reader_close(r);
  SaveRaw(dir);
  SaveChild(dir);
  SaveKeyed(dir);
  RemoveScratch();
  printf("capi writer: setters, statistics, raw, incremental and keyed saves OK\n");
  return 0;
}
