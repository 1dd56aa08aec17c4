// hlt-mkimage: writes a synthetic memory image (a developer tool for tests, benchmarks and the demo), or a changed
// copy of one (the next save of the same guest: for incremental checkpoints, format-spec 12).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "support/synthetic_memory.h"

namespace {

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Copies IN to OUT with CHANGED_PERMILLE of its pages given new content and ZERO_PERMILLE of its non-zero pages
// zeroed; the new content of the changed pages alone goes to CHANGED (what an ideal incremental save compresses).
int Mutate(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: hlt-mkimage --mutate IN OUT CHANGED_PERMILLE ZERO_PERMILLE SEED CHANGED\n";
    return 2;
  }
  const uint64_t changed_pm = std::strtoull(argv[4], nullptr, 10), zero_pm = std::strtoull(argv[5], nullptr, 10);
  uint64_t rng = std::strtoull(argv[6], nullptr, 10);
  std::ifstream in(argv[2], std::ios::binary);
  std::ofstream out(argv[3], std::ios::binary | std::ios::trunc), changed(argv[7], std::ios::binary | std::ios::trunc);
  if (!in || !out || !changed) {
    std::cerr << "hlt-mkimage: cannot open the files\n";
    return 3;
  }
  halite::testing::SyntheticMemory mem(rng ^ 0x5EED);
  const halite::testing::PageFlavor flavors[] = {halite::testing::PageFlavor::kText, halite::testing::PageFlavor::kCode,
                                                 halite::testing::PageFlavor::kPointers,
                                                 halite::testing::PageFlavor::kSparse};
  std::vector<uint8_t> page(4096);
  const std::vector<uint8_t> zeros(4096, 0);
  uint64_t pages = 0, n_changed = 0, n_zeroed = 0;
  while (in.read(reinterpret_cast<char*>(page.data()), 4096)) {
    ++pages;
    const uint64_t r = SplitMix(&rng) % 1000;
    if (r < changed_pm) {
      mem.MakePage(flavors[SplitMix(&rng) % 4], page.data());
      changed.write(reinterpret_cast<const char*>(page.data()), 4096);
      ++n_changed;
    } else if (r < changed_pm + zero_pm && page != zeros) {
      page = zeros;
      ++n_zeroed;
    }
    out.write(reinterpret_cast<const char*>(page.data()), 4096);
  }
  if (!out || !changed) {
    std::cerr << "hlt-mkimage: write failed\n";
    return 3;
  }
  std::printf("pages %llu changed %llu newly_zero %llu\n", (unsigned long long)pages, (unsigned long long)n_changed,
              (unsigned long long)n_zeroed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--mutate") == 0) return Mutate(argc, argv);
  if (argc < 3) {
    std::cerr << "usage: hlt-mkimage OUT SIZE_MIB [SEED]\n"
                 "       hlt-mkimage --mutate IN OUT CHANGED_PERMILLE ZERO_PERMILLE SEED CHANGED\n"
                 "Writes SIZE_MIB MiB of deterministic synthetic guest memory (zero, text, code, pointers, sparse\n"
                 "structs, duplicates, random) to OUT; or a copy of IN with some pages changed (their new content\n"
                 "also written alone to CHANGED) and some non-zero pages zeroed.\n";
    return 2;
  }
  uint64_t mib = std::strtoull(argv[2], nullptr, 10);
  uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  halite::Status s = halite::testing::WriteSyntheticImage(argv[1], mib << 20, seed);
  if (!s.ok()) {
    std::cerr << "hlt-mkimage: " << s.ToString() << "\n";
    return 3;
  }
  return 0;
}
