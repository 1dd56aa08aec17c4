// hlt-mkimage: writes a synthetic memory image (a developer tool for tests, benchmarks and the demo).
#include <cstdlib>
#include <iostream>
#include <string>

#include "support/synthetic_memory.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: hlt-mkimage OUT SIZE_MIB [SEED]\n"
                 "Writes SIZE_MIB MiB of deterministic synthetic guest memory (zero, text, code, pointers, sparse\n"
                 "structs, duplicates, random) to OUT.\n";
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
