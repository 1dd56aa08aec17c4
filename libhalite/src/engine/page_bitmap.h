// A fixed-size bitmap whose bits are set and tested from many threads without locks.
//
// The engine keeps one bit per page for "claimed" (one thread has taken the job of installing it) and one for
// "installed"; a claim is a fetch_or, so exactly one thread wins each page.
#ifndef HALITE_ENGINE_PAGE_BITMAP_H_
#define HALITE_ENGINE_PAGE_BITMAP_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace halite::engine {

class AtomicBitmap {
 public:
  explicit AtomicBitmap(uint64_t bits) : words_((bits + 63) / 64), bits_(new std::atomic<uint64_t>[words_]) {
    for (uint64_t i = 0; i < words_; ++i) bits_[i].store(0, std::memory_order_relaxed);
  }

  bool Test(uint64_t i) const { return bits_[i / 64].load(std::memory_order_acquire) & Mask(i); }
  // Sets the bit; true when this call changed it from 0 to 1.
  bool TrySet(uint64_t i) { return !(bits_[i / 64].fetch_or(Mask(i), std::memory_order_acq_rel) & Mask(i)); }
  void Set(uint64_t i) { bits_[i / 64].fetch_or(Mask(i), std::memory_order_release); }
  void Clear(uint64_t i) { bits_[i / 64].fetch_and(~Mask(i), std::memory_order_release); }
  uint64_t size_bits() const { return words_ * 64; }

 private:
  static uint64_t Mask(uint64_t i) { return uint64_t{1} << (i % 64); }
  uint64_t words_;
  std::unique_ptr<std::atomic<uint64_t>[]> bits_;
};

}  // namespace halite::engine

#endif  // HALITE_ENGINE_PAGE_BITMAP_H_
