// Helpers shared by the fuzz targets: a consumer that turns fuzzer bytes into choices, and a trap that reports
// which property failed. Every target is also compiled by the plain replay driver (GCC, no libFuzzer), so this
// header uses nothing from libFuzzer.
#ifndef HALITE_FUZZ_FUZZ_INPUT_H_
#define HALITE_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "halite/status.h"

namespace halite::fuzz {

// Reads choices from the front of the input. When the input runs out every read returns zero (or the low end of
// a range), so any input, however short, is a complete program.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t remaining() const { return size_ - pos_; }
  bool empty() const { return pos_ == size_; }

  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return uint16_t(U8() | (U8() << 8)); }
  uint32_t U32() { return uint32_t(U16()) | (uint32_t(U16()) << 16); }
  uint64_t U64() { return uint64_t(U32()) | (uint64_t(U32()) << 32); }
  bool Bool() { return U8() & 1; }
  // A value in [lo, hi], spread evenly enough for fuzzing.
  uint64_t Range(uint64_t lo, uint64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = hi - lo;
    uint64_t v = span < 0x100 ? U8() : span < 0x10000 ? U16() : span < 0x100000000ull ? U32() : U64();
    return span == UINT64_MAX ? v : lo + v % (span + 1);
  }
  // Up to n bytes (fewer when the input runs out).
  std::span<const uint8_t> Bytes(size_t n) {
    n = n < remaining() ? n : remaining();
    std::span<const uint8_t> s(data_ + pos_, n);
    pos_ += n;
    return s;
  }
  std::span<const uint8_t> Rest() { return Bytes(remaining()); }
  // A string of printable ASCII of length in [min_len, max_len] (shorter when the input runs out).
  std::string Printable(size_t min_len, size_t max_len) {
    size_t n = Range(min_len, max_len);
    std::string s;
    for (size_t i = 0; i < n; ++i) s.push_back(char(0x20 + U8() % 95));
    while (s.size() < min_len) s.push_back('x');
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A property of the code under test did not hold: print which, then crash so the fuzzer keeps the input.
[[noreturn]] inline void PropertyFailed(const char* file, int line, const char* what, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: fuzz property failed: %s %s\n", file, line, what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace halite::fuzz

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) ::halite::fuzz::PropertyFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)
#define FUZZ_CHECK_MSG(cond, detail) \
  do {                               \
    if (!(cond)) ::halite::fuzz::PropertyFailed(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)

#endif  // HALITE_FUZZ_FUZZ_INPUT_H_
