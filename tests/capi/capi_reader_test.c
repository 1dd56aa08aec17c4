/* The C API's hlt-restore info, verify and parents, and the reader flags (hlt_open_options): figures, the info
 * JSON, the chain of an incremental checkpoint whose parent moved, verify on a sound and a damaged file, keys.
 * Compiled as C99 and linked to libhalite.so.
 *   capi_reader_test               the checks
 *   capi_reader_test --json CKPT   prints hlt_reader_info_json of CKPT (info_json_test.sh compares it) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "capi_test_util.h"
#include "halite/halite_c.h"

enum { kPages = 32 };

/* kPages pages of `stamp` (page 3 zero, page 4 absent), blocks of 4; with a parent, pages 0..27 unchanged. */
static void Save(const char* path, const char* parent, uint32_t stamp, const char* key_file) {
  hlt_writer* w;
  unsigned char page[HLT_PAGE_SIZE];
  uint32_t region;
  ExpectRc(hlt_writer_create(path, &w), HLT_OK, "create");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_BLOCK_PAGES, 4), HLT_OK, "block pages");
  if (parent) ExpectRc(hlt_writer_set_string(w, HLT_WRITER_PARENT, parent), HLT_OK, "parent");
  if (key_file) ExpectRc(hlt_writer_set_string(w, HLT_WRITER_ENCRYPT_KEY_FILE, key_file), HLT_OK, "key file");
  ExpectRc(hlt_writer_add_region(w, "ram", 0, kPages * HLT_PAGE_SIZE, &region), HLT_OK, "region");
  ExpectRc(hlt_writer_put_zero_pages(w, region, 3, 1), HLT_OK, "zero page");
  for (uint64_t p = 0; p < kPages; ++p) {
    if (p == 3 || p == 4) continue;
    FillPage(p, p < 28 ? 1 : stamp, page);
    ExpectRc(hlt_writer_put_page(w, region, p, page), HLT_OK, "put_page");
  }
  ExpectRc(hlt_writer_add_blob(w, "state", "0123456789", 10), HLT_OK, "blob");
  ExpectRc(hlt_writer_finish(w), HLT_OK, "finish");
}

static uint64_t Info(const hlt_reader* r, hlt_info what) {
  uint64_t v = UINT64_MAX;
  ExpectRc(hlt_reader_get_info(r, what, &v), HLT_OK, "hlt_reader_get_info");
  return v;
}

static void Figures(const char* path) {
  hlt_reader* r;
  ExpectRc(hlt_reader_open(path, &r), HLT_OK, "open flat");
  Expect(Info(r, HLT_INFO_FORMAT_MAJOR) == 1, "format 1.x");
  Expect(Info(r, HLT_INFO_PAGES) == kPages, "pages");
  Expect(Info(r, HLT_INFO_RAW_BYTES) == kPages * HLT_PAGE_SIZE, "raw bytes");
  Expect(Info(r, HLT_INFO_ZERO_PAGES) == 1, "one zero page");
  Expect(Info(r, HLT_INFO_ABSENT_PAGES) == 1, "one absent page");
  Expect(Info(r, HLT_INFO_STORED_PAGES) == kPages - 2, "stored pages");
  Expect(Info(r, HLT_INFO_DUPLICATE_PAGES) == 0, "no duplicates");
  Expect(Info(r, HLT_INFO_BLOCKS) == (kPages - 2 + 3) / 4, "30 pages in blocks of 4 make 8 blocks");
  Expect(Info(r, HLT_INFO_BLOBS) == 1, "one blob");
  Expect(Info(r, HLT_INFO_CHAIN_DEPTH) == 0, "a full checkpoint");
  Expect(Info(r, HLT_INFO_ENCRYPTED) == 0 && Info(r, HLT_INFO_SEALED) == 0, "not encrypted");
  uint64_t v;
  ExpectRc(hlt_reader_get_info(r, (hlt_info)999, &v), HLT_EINVAL, "an unknown figure");
  Expect(hlt_reader_chain_length(r) == 1, "a chain of one file");
  char* json = NULL;
  ExpectRc(hlt_reader_info_json(r, &json), HLT_OK, "info json");
  char want[64];
  snprintf(want, sizeof want, "\"stored_pages\":%d,", kPages - 2);
  Expect(strstr(json, want) != NULL, "the JSON holds the stored pages");
  Expect(json[strlen(json) - 1] == '\n', "the JSON ends with a newline, as the tool prints it");
  hlt_free(json);
  hlt_reader_close(r);
}

static uint64_t verify_calls, verify_total;
static void OnProgress(void* ctx, uint64_t done, uint64_t total) {
  (void)ctx;
  (void)done;
  ++verify_calls;
  verify_total = total;
}

/* A copy of `path` with one byte flipped in its first block's payload (offset 4096 + 100). */
static void Damage(const char* path, const char* copy) {
  FILE* in = fopen(path, "rb");
  Expect(in != NULL, path);
  static unsigned char bytes[1 << 20];
  size_t n = fread(bytes, 1, sizeof bytes, in);
  fclose(in);
  Expect(n > 8192 && n < sizeof bytes, "a small checkpoint");
  bytes[4096 + 100] ^= 0x40;
  WriteFile(copy, bytes, n);
}

static void Verify(const char* dir) {
  hlt_reader* r;
  ExpectRc(hlt_reader_open(PathIn(dir, "flat.hlt"), &r), HLT_OK, "open flat");
  ExpectRc(hlt_reader_verify(r, OnProgress, NULL), HLT_OK, "verify flat");
  Expect(verify_calls > 0 && verify_total == Info(r, HLT_INFO_BLOCKS), "progress counts the blocks");
  hlt_reader_close(r);
  Damage(PathIn(dir, "flat.hlt"), PathIn(dir, "damaged.hlt"));
  int rc = hlt_reader_open(PathIn(dir, "damaged.hlt"), &r);
  if (rc == HLT_OK) {
    rc = hlt_reader_verify(r, NULL, NULL);
    hlt_reader_close(r);
  }
  ExpectRc(rc, HLT_ECORRUPT, "verify a damaged checkpoint");
  ExpectLastErrorHas("damaged.hlt", "the damaged file is named");
  printf("damaged: %s\n", hlt_last_error());
}

/* The child's parent moved to dir/moved/: found with HLT_OPEN_PARENT_DIR; the chain's files described. */
static void Parents(const char* dir) {
  Save(PathIn(dir, "child.hlt"), PathIn(dir, "flat.hlt"), 2, NULL);
  char moved_dir[512], moved[600];
  snprintf(moved_dir, sizeof moved_dir, "%s", PathIn(dir, "moved"));
  snprintf(moved, sizeof moved, "%s/flat.hlt", moved_dir);
  Expect(mkdir(moved_dir, 0700) == 0, "mkdir moved");
  Expect(rename(PathIn(dir, "flat.hlt"), moved) == 0, "move the parent");

  hlt_reader* r;
  Expect(hlt_reader_open(PathIn(dir, "child.hlt"), &r) != HLT_OK, "a child whose parent moved does not open alone");
  ExpectLastErrorHas("flat.hlt", "the missing parent is named");
  hlt_open_options* o;
  ExpectRc(hlt_open_options_create(&o), HLT_OK, "options");
  ExpectRc(hlt_open_options_set_string(o, HLT_OPEN_PARENT_DIR, moved_dir), HLT_OK, "parent dir");
  ExpectRc(hlt_open_options_set_param(o, HLT_OPEN_MAX_CHAIN_DEPTH, 17), HLT_EINVAL, "chain depth 17");
  ExpectRc(hlt_open_options_set_param(o, (hlt_open_param)999, 0), HLT_EINVAL, "an unknown open parameter");
  ExpectRc(hlt_reader_open_with(PathIn(dir, "child.hlt"), o, &r), HLT_OK, "open child with parent dir");
  hlt_open_options_free(o); /* the reader keeps what it needs */

  Expect(hlt_reader_chain_length(r) == 2, "a chain of two files");
  Expect(Info(r, HLT_INFO_CHAIN_DEPTH) == 1, "one parent link");
  const char *name, *hint;
  uint8_t id0[16], id1[16];
  ExpectRc(hlt_reader_chain_file(r, 0, &name, &hint, id0), HLT_OK, "chain file 0");
  Expect(strstr(name, "child.hlt") != NULL && strcmp(hint, "flat.hlt") == 0, "level 0 is the child, naming flat.hlt");
  ExpectRc(hlt_reader_chain_file(r, 1, &name, &hint, id1), HLT_OK, "chain file 1");
  Expect(strcmp(name, moved) == 0 && hint[0] == '\0', "level 1 is the moved parent, a full checkpoint");
  Expect(memcmp(id0, id1, 16) != 0, "two file ids");
  ExpectRc(hlt_reader_chain_file(r, 2, &name, &hint, id1), HLT_EINVAL, "no level 2");
  uint64_t pages0, pages1, depth1;
  ExpectRc(hlt_reader_chain_get(r, 0, HLT_CHAIN_PAGES, &pages0), HLT_OK, "level 0 pages");
  ExpectRc(hlt_reader_chain_get(r, 1, HLT_CHAIN_PAGES, &pages1), HLT_OK, "level 1 pages");
  ExpectRc(hlt_reader_chain_get(r, 1, HLT_CHAIN_DEPTH, &depth1), HLT_OK, "level 1 depth");
  printf("chain: child serves %llu pages, parent %llu\n", (unsigned long long)pages0, (unsigned long long)pages1);
  Expect(pages0 >= 4 && pages1 >= 20 && pages0 + pages1 == kPages - 2, "the files serve the stored pages");
  Expect(depth1 == 0, "the parent is full");
  unsigned char got[HLT_PAGE_SIZE], want[HLT_PAGE_SIZE];
  for (uint64_t p = 0; p < kPages; ++p) {
    if (p == 3 || p == 4) continue;
    FillPage(p, p < 28 ? 1 : 2, want);
    ExpectRc(hlt_reader_read_page(r, 0, p, got), HLT_OK, "read child page");
    Expect(memcmp(got, want, sizeof got) == 0, "a child page reads as saved");
  }
  ExpectRc(hlt_reader_verify(r, NULL, NULL), HLT_OK, "verify the chain");
  uint64_t fetched;
  ExpectRc(hlt_reader_get_stat(r, HLT_READER_STAT_BLOCKS_FETCHED, &fetched), HLT_OK, "blocks fetched");
  Expect(fetched > 0, "reads counted");
  hlt_reader_close(r);
}

/* Encrypted: refused without the key naming its id, described without it (13.7), read with a key file. */
static void Keys(const char* dir) {
  const char* hex = "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf\n";
  WriteFile(PathIn(dir, "k.key"), hex, strlen(hex));
  Save(PathIn(dir, "enc.hlt"), NULL, 1, PathIn(dir, "k.key"));
  hlt_reader* r;
  ExpectRc(hlt_reader_open(PathIn(dir, "enc.hlt"), &r), HLT_EAUTH, "encrypted without its key");
  ExpectLastErrorHas("key id", "the key id is named");
  hlt_open_options* o;
  ExpectRc(hlt_open_options_create(&o), HLT_OK, "options");
  ExpectRc(hlt_open_options_set_param(o, HLT_OPEN_WITHOUT_KEY, 1), HLT_OK, "without key");
  ExpectRc(hlt_reader_open_with(PathIn(dir, "enc.hlt"), o, &r), HLT_OK, "open without key");
  Expect(Info(r, HLT_INFO_SEALED) == 1 && Info(r, HLT_INFO_ENCRYPTED) == 1, "sealed");
  Expect(Info(r, HLT_INFO_STORED_PAGES) == 0 && Info(r, HLT_INFO_PAGES) == kPages, "no page map, regions known");
  ExpectRc(hlt_reader_verify(r, NULL, NULL), HLT_OK, "verify without the key: the checksums");
  hlt_reader_close(r);
  ExpectRc(hlt_open_options_set_param(o, HLT_OPEN_WITHOUT_KEY, 0), HLT_OK, "with key");
  ExpectRc(hlt_open_options_set_string(o, HLT_OPEN_KEY_FILE, PathIn(dir, "nokey")), HLT_EIO, "a missing key file");
  ExpectRc(hlt_open_options_set_string(o, HLT_OPEN_KEY_FILE, PathIn(dir, "k.key")), HLT_OK, "key file");
  ExpectRc(hlt_reader_open_with(PathIn(dir, "enc.hlt"), o, &r), HLT_OK, "open with the key file");
  hlt_open_options_free(o);
  Expect(Info(r, HLT_INFO_SEALED) == 0 && Info(r, HLT_INFO_STORED_PAGES) == kPages - 2, "readable with its key");
  ExpectRc(hlt_reader_verify(r, NULL, NULL), HLT_OK, "verify with the key: every tag");
  hlt_reader_close(r);
}

static int PrintJson(const char* path) {
  hlt_reader* r;
  char* json;
  hlt_open_options* o;
  ExpectRc(hlt_open_options_create(&o), HLT_OK, "options");
  ExpectRc(hlt_open_options_set_param(o, HLT_OPEN_WITHOUT_KEY, 1), HLT_OK, "without key, as info");
  ExpectRc(hlt_reader_open_with(path, o, &r), HLT_OK, "open");
  hlt_open_options_free(o);
  ExpectRc(hlt_reader_info_json(r, &json), HLT_OK, "info json");
  fputs(json, stdout);
  hlt_free(json);
  hlt_reader_close(r);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--json") == 0) return PrintJson(argv[2]);
  if (argc == 3 && strcmp(argv[1], "--save") == 0) {
    Save(argv[2], NULL, 1, NULL);
    return 0;
  }
  const char* dir = ScratchDir();
  Save(PathIn(dir, "flat.hlt"), NULL, 1, NULL);
  Figures(PathIn(dir, "flat.hlt"));
  Verify(dir);
  Parents(dir);
  Keys(dir);
  RemoveScratch();
  printf("capi reader: info, verify, parents and keys OK\n");
  return 0;
}
