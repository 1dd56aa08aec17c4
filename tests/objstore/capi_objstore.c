/* The C API on object-store URIs (issue 13): hlt_writer_create and hlt_reader_open take s3:// and rados:// like a
 * file name. For each URI given: write a small checkpoint, read every page back; then abandon a second save
 * (hlt_writer_abort) and check that no object became visible. Issue 25: info, verify and the host block cache
 * (HLT_OPEN_BLOCK_CACHE_DIR, statistics by hlt_reader_get_stat) on the same URIs.
 *   capi_objstore URI... */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <halite/halite_c.h>
#include <stdio.h>
#include <stdlib.h>
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

static int RemoveOne(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static uint64_t Stat(const hlt_reader* r, hlt_reader_stat stat) {
  uint64_t v = UINT64_MAX;
  if (hlt_reader_get_stat(r, stat, &v) != 0) fprintf(stderr, "hlt_reader_get_stat failed: %s\n", hlt_last_error());
  return v;
}

/* Reads every page of `uri` through a reader opened with the block cache `cache_dir` (HLT_OPEN_BLOCK_CACHE_DIR).
 * *fetched and *hits receive the reader's storage statistics. */
static int ReadCached(const char* uri, const char* cache_dir, uint64_t* fetched, uint64_t* hits) {
  hlt_open_options* o;
  hlt_reader* r;
  unsigned char got[HLT_PAGE_SIZE], want[HLT_PAGE_SIZE];
  int rc;
  if ((rc = hlt_open_options_create(&o)) != 0) return Fail(uri, "hlt_open_options_create", rc);
  if ((rc = hlt_open_options_set_string(o, HLT_OPEN_BLOCK_CACHE_DIR, cache_dir)) != 0) {
    return Fail(uri, "HLT_OPEN_BLOCK_CACHE_DIR", rc);
  }
  if ((rc = hlt_open_options_set_param(o, HLT_OPEN_BLOCK_CACHE_SIZE, 64 << 20)) != 0) {
    return Fail(uri, "HLT_OPEN_BLOCK_CACHE_SIZE", rc);
  }
  rc = hlt_reader_open_with(uri, o, &r);
  hlt_open_options_free(o);
  if (rc != 0) return Fail(uri, "hlt_reader_open_with (block cache)", rc);
  for (uint64_t p = 0; p < kPages; ++p) {
    if ((rc = hlt_reader_read_page(r, 0, p, got)) != 0) return Fail(uri, "hlt_reader_read_page (cached)", rc);
    Expected(p, want);
    if (memcmp(got, want, sizeof got) != 0) return Fail(uri, "a page read through the block cache differs", 0);
  }
  *fetched = Stat(r, HLT_READER_STAT_BLOCKS_FETCHED);
  *hits = Stat(r, HLT_READER_STAT_CACHE_HITS);
  hlt_reader_close(r);
  return 0;
}

/* info, verify and the block cache on an object URI: a first reader fetches every block from storage once and fills
 * the cache, a second one gets every block from the cache and none from storage. */
static int CheckCacheInfoVerify(const char* uri) {
  hlt_reader* r;
  uint64_t blocks = 0, stored = 0;
  int rc;
  if ((rc = hlt_reader_open(uri, &r)) != 0) return Fail(uri, "hlt_reader_open", rc);
  if ((rc = hlt_reader_get_info(r, HLT_INFO_BLOCKS, &blocks)) != 0) return Fail(uri, "HLT_INFO_BLOCKS", rc);
  if ((rc = hlt_reader_get_info(r, HLT_INFO_STORED_PAGES, &stored)) != 0) return Fail(uri, "HLT_INFO_STORED", rc);
  if (stored != kPages - kPages / 4 || blocks == 0) return Fail(uri, "info: stored pages or blocks", 0);
  if ((rc = hlt_reader_verify(r, NULL, NULL)) != 0) return Fail(uri, "hlt_reader_verify", rc);
  hlt_reader_close(r);

  char cache_dir[] = "capi-block-cache-XXXXXX";
  if (!mkdtemp(cache_dir)) return Fail(uri, "mkdtemp", 0);
  uint64_t fetched1, hits1, fetched2, hits2;
  if (ReadCached(uri, cache_dir, &fetched1, &hits1) || ReadCached(uri, cache_dir, &fetched2, &hits2)) return 1;
  nftw(cache_dir, RemoveOne, 16, FTW_DEPTH | FTW_PHYS);
  printf("%s: %llu blocks; first reader fetched %llu (cache hits %llu), second fetched %llu (cache hits %llu)\n", uri,
         (unsigned long long)blocks, (unsigned long long)fetched1, (unsigned long long)hits1,
         (unsigned long long)fetched2, (unsigned long long)hits2);
  /* Each stored page read asks for its block (the reader keeps no block between reads): the second reader's 72
   * reads are all cache hits, and storage is never asked. */
  if (fetched1 != blocks || fetched2 != 0 || hits2 != stored) {
    return Fail(uri, "the second reader must get every block from the block cache", 0);
  }
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
  if (CheckCacheInfoVerify(uri)) return 1;

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
