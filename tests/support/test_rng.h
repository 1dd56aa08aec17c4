// The deterministic generator of the test-support images (the fragmented guest, the compression corpus):
// splitmix64, seeded so that seed 0 is not a degenerate stream. Same seed, same image, on every machine.
#ifndef HALITE_TESTS_SUPPORT_TEST_RNG_H_
#define HALITE_TESTS_SUPPORT_TEST_RNG_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace halite::testing {

class TestRng {
 public:
  explicit TestRng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return n ? Next() % n : 0; }
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }
  bool Chance(double p) { return double(Next() >> 11) * 0x1.0p-53 < p; }
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(i)]);
  }

 private:
  uint64_t state_;
};

}  // namespace halite::testing

#endif  // HALITE_TESTS_SUPPORT_TEST_RNG_H_
