// Synthetic guest memory for tests, benchmarks and the demo: deterministic, and shaped like real memory.
//
// Memory is generated in runs of 1..64 pages of one kind, mixed in proportions seen in real guest RAM dumps
// (a mostly-idle Linux guest is 30-60% zero pages; page cache holds text; kernel and user heaps hold pointer-rich
// structures; shared libraries appear several times):
//   zero 30%, text 14% (log lines, prose), code 14% (x86-64-like instruction streams), pointers 14% (heap
//   objects: canonical kernel/user addresses, small integers), sparse structs 10%, duplicates 10% (copies of
//   earlier pages), random 8% (compressed or encrypted data).
#ifndef HALITE_TESTS_SYNTHETIC_MEMORY_H_
#define HALITE_TESTS_SYNTHETIC_MEMORY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::testing {

enum class PageFlavor : uint8_t { kZero, kText, kCode, kPointers, kSparse, kDuplicate, kRandom };

class SyntheticMemory {
 public:
  explicit SyntheticMemory(uint64_t seed);
  // Fills `out` (a multiple of 4096 bytes) with the next pages of the stream.
  void Fill(std::span<uint8_t> out);
  // One page of a given flavour (for tests that need a specific kind).
  void MakePage(PageFlavor flavor, uint8_t* page);

 private:
  uint64_t Next();
  uint64_t Below(uint64_t n) { return Next() % n; }
  PageFlavor PickFlavor();
  void Text(uint8_t* p);
  void Code(uint8_t* p);
  void Pointers(uint8_t* p);
  void Sparse(uint8_t* p);
  void Random(uint8_t* p);

  uint64_t state_;
  PageFlavor run_flavor_ = PageFlavor::kZero;
  uint64_t run_left_ = 0;
  uint64_t line_no_ = 0;
  std::vector<uint8_t> library_;  // a pool of earlier non-zero pages that duplicates copy
  size_t library_pages_ = 0;
};

// Writes `bytes` (a multiple of 4096) of synthetic memory to `path`.
Status WriteSyntheticImage(const std::string& path, uint64_t bytes, uint64_t seed);
std::vector<uint8_t> SyntheticBytes(uint64_t bytes, uint64_t seed);

}  // namespace halite::testing

#endif  // HALITE_TESTS_SYNTHETIC_MEMORY_H_
