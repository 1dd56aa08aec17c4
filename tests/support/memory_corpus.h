// Memory images for compression tests and the corpus benchmark (bench/core/bench_corpus): guest memory whose pages
// repeat content across distant pages, as page caches, heaps and copies of the same libraries do.
//
// An image is built from a pool of files (real ones from /usr for the benchmark, generated ones for tests) the way
// a guest's memory holds them: the page cache holds files page-aligned, in readahead chunks scattered over physical
// memory; processes hold private copies of libraries' data pages, relocated to their own base address and partly
// written; heaps hold copies of file content at arbitrary byte offsets; the rest is pointer-rich heap objects,
// compressed data and zero pages. Deterministic for a given pool and seed.
#ifndef HALITE_TESTS_MEMORY_CORPUS_H_
#define HALITE_TESTS_MEMORY_CORPUS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace halite::testing {

struct CorpusFile {
  enum class Kind : uint8_t { kLibrary, kText, kCompressed };
  std::string name;
  Kind kind = Kind::kText;
  std::vector<uint8_t> bytes;
};

// Fractions of the image's pages given to each kind of content; whatever is left is zero pages.
struct ImageRecipe {
  double page_cache = 0.30;      // files, page-aligned, in readahead chunks at random places
  double private_copies = 0.12;  // copies of a dozen libraries, each relocated to a process's base, partly written
  double heap_copies = 0.10;     // runs of file content copied at a random byte offset (read() into a buffer)
  double heap_objects = 0.14;    // pointer-rich structures with short strings from the text files
  double compressed = 0.04;      // compressed files (or random bytes when the pool has none)
  unsigned processes = 6;        // processes (base addresses) the private copies belong to
  uint32_t readahead_pages = 128;  // page cache chunks hold 4..this many consecutive pages of a file
};

// Builds `pages` pages of memory from `pool` (which must hold at least one library or text file).
std::vector<uint8_t> BuildMemoryImage(std::span<const CorpusFile> pool, uint64_t pages, const ImageRecipe& recipe,
                                      uint64_t seed);

// Generated stand-ins for /usr: "libraries" (x86-like code built from a per-library and a shared phrase book, then a
// data part of offsets and strings) and "text" files (lines of a shared vocabulary with per-file recurring phrases),
// about `bytes` in all. What matters to the tests is that content recurs at distances of 64 KiB to a few MiB within a
// file and across files, as in real libraries and sources.
std::vector<CorpusFile> GeneratedPool(uint64_t bytes, uint64_t seed);

// The next save of the same guest: `fraction_rewritten` of the non-zero pages partly rewritten (8 bytes in every
// 64, at an offset chosen per page), `fraction_zeroed` of the other non-zero pages zeroed. Returns the numbers of the
// pages that changed, in increasing order.
std::vector<uint64_t> RewritePages(std::span<uint8_t> image, double fraction_rewritten, double fraction_zeroed,
                                   uint64_t seed);

}  // namespace halite::testing

#endif  // HALITE_TESTS_MEMORY_CORPUS_H_
