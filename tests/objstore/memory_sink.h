// A PageSink holding guest memory in plain buffers, for the object-store tests that restore through the engine
// (loader_order_test.cc, demand_first_test.cc): counts pages installed twice and compares with the image.
#ifndef HALITE_TESTS_OBJSTORE_MEMORY_SINK_H_
#define HALITE_TESTS_OBJSTORE_MEMORY_SINK_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/page_sink.h"

namespace halite::testing {

// Guest memory in plain buffers; counts pages installed twice.
class MemorySink final : public PageSink {
 public:
  explicit MemorySink(const std::vector<Region>& regions) {
    for (const Region& r : regions) {
      memory_.emplace_back(r.size, 0xEE);
      done_.emplace_back(r.page_count());
    }
  }
  Status Install(std::span<const PageInstall> batch, InstallPriority, size_t* runs_installed) override {
    *runs_installed = 0;
    for (const PageInstall& run : batch) {
      for (uint64_t i = 0; i < run.count; ++i) {
        uint8_t* dst = memory_[run.first.region].data() + (run.first.page + i) * 4096;
        if (run.zero()) {
          std::memset(dst, 0, 4096);
        } else {
          std::memcpy(dst, run.data.data() + i * 4096, 4096);
        }
        if (done_[run.first.region][run.first.page + i].exchange(true)) twice_.fetch_add(1);
      }
      ++*runs_installed;
    }
    return Status::Ok();
  }
  bool IsPresent(PageRef) const override { return false; }
  // Pages installed, and whether each equals `image` (region 0; pages never installed read as zero).
  uint64_t Mismatches(const std::vector<uint8_t>& image) const {
    uint64_t bad = 0;
    static const std::vector<uint8_t> kZero(4096, 0);
    for (uint64_t p = 0; p * 4096 < image.size(); ++p) {
      const uint8_t* got = done_[0][p] ? memory_[0].data() + p * 4096 : kZero.data();
      if (std::memcmp(got, image.data() + p * 4096, 4096) != 0) ++bad;
    }
    return bad;
  }
  uint64_t twice() const { return twice_.load(); }

 private:
  std::vector<std::vector<uint8_t>> memory_;
  std::vector<std::vector<std::atomic<bool>>> done_;
  std::atomic<uint64_t> twice_{0};
};

}  // namespace halite::testing

#endif  // HALITE_TESTS_OBJSTORE_MEMORY_SINK_H_
