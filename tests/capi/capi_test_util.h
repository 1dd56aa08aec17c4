/* What the C API tests share: a scratch directory removed when they pass, checks that say what failed. */
#ifndef HALITE_TESTS_CAPI_TEST_UTIL_H_
#define HALITE_TESTS_CAPI_TEST_UTIL_H_

#include <stddef.h>
#include <stdint.h>

#include "halite/halite_c.h"

/* Prints "FAIL: what: code text (last error)" and exits 1 when rc != want. */
void ExpectRc(int rc, int want, const char* what);
/* Fails unless cond; prints what. */
void Expect(int cond, const char* what);
/* Fails unless hlt_last_error() contains `needle`. */
void ExpectLastErrorHas(const char* needle, const char* what);
/* Makes a fresh scratch directory under the working directory and returns its path (static storage). */
const char* ScratchDir(void);
/* The path dir/name into a static buffer of a rotating set of 8. */
const char* PathIn(const char* dir, const char* name);
/* Removes the scratch directory and everything in it. */
void RemoveScratch(void);
/* Page p's deterministic content, with a stamp. */
void FillPage(uint64_t p, uint32_t stamp, unsigned char* page);
/* Writes `len` bytes to a new file. */
void WriteFile(const char* path, const void* data, size_t len);

#endif
