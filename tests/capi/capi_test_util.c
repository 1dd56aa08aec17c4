#include "capi_test_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[256];

void ExpectRc(int rc, int want, const char* what) {
  if (rc == want) return;
  fprintf(stderr, "FAIL: %s: got %d (%s), expected %d (%s); last error: %s\n", what, rc, hlt_strerror(rc), want,
          hlt_strerror(want), hlt_last_error());
  exit(1);
}

void Expect(int cond, const char* what) {
  if (cond) return;
  fprintf(stderr, "FAIL: %s (last error: %s)\n", what, hlt_last_error());
  exit(1);
}

void ExpectLastErrorHas(const char* needle, const char* what) {
  if (strstr(hlt_last_error(), needle)) return;
  fprintf(stderr, "FAIL: %s: the last error \"%s\" does not mention \"%s\"\n", what, hlt_last_error(), needle);
  exit(1);
}

const char* ScratchDir(void) {
  char* cwd = getcwd(NULL, 0);
  Expect(cwd != NULL, "getcwd");
  snprintf(scratch, sizeof scratch, "%s/capi-scratch-XXXXXX", cwd);
  free(cwd);
  Expect(mkdtemp(scratch) != NULL, "mkdtemp");
  return scratch;
}

const char* PathIn(const char* dir, const char* name) {
  static char buffers[8][512];
  static int next;
  char* b = buffers[next++ % 8];
  snprintf(b, sizeof buffers[0], "%s/%s", dir, name);
  return b;
}

static int RemoveOne(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void RemoveScratch(void) {
  if (scratch[0]) nftw(scratch, RemoveOne, 16, FTW_DEPTH | FTW_PHYS);
}

void FillPage(uint64_t p, uint32_t stamp, unsigned char* page) {
  uint64_t x = p * 0x9e3779b97f4a7c15ULL + stamp;
  for (size_t i = 0; i < HLT_PAGE_SIZE; ++i) {
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ULL;
    page[i] = (unsigned char)(x >> 56);
  }
}

void WriteFile(const char* path, const void* data, size_t len) {
  FILE* f = fopen(path, "wb");
  Expect(f != NULL, path);
  Expect(fwrite(data, 1, len, f) == len, path);
  Expect(fclose(f) == 0, path);
}
