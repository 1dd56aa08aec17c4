// The one latency histogram every component reports percentiles from (the restore engine's faults, the QEMU
// channel's requests, the benchmarks): log-linear buckets (16 per power of two, so a percentile is within ~6%
// of the truth) plus an exact maximum, in fixed memory (~31 KiB) however many values are recorded. Record() is
// wait-free and may be called from any thread.
#ifndef HALITE_LATENCY_HISTOGRAM_H_
#define HALITE_LATENCY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "halite/export.h"

namespace halite {

// Percentiles of a latency histogram (log-linear buckets, within ~6%; max is exact).
struct HALITE_EXPORT LatencySummary {
  uint64_t count = 0;
  uint64_t p50_ns = 0;
  uint64_t p90_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t max_ns = 0;
  double mean_ns = 0;
};

class HALITE_EXPORT LatencyHistogram {
 public:
  static constexpr int kSubBits = 4;  // 16 sub-buckets per power of two
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = kSub + (64 - kSubBits) * kSub;

  LatencyHistogram();
  void Record(uint64_t ns);
  LatencySummary Summary() const;

  // Bucket arithmetic, exposed for tests.
  static int BucketOf(uint64_t ns);
  static uint64_t BucketLow(int bucket);   // smallest value in the bucket
  static uint64_t BucketHigh(int bucket);  // largest value in the bucket

 private:
  std::array<std::atomic<uint64_t>, kBuckets> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
};

}  // namespace halite

#endif  // HALITE_LATENCY_HISTOGRAM_H_
