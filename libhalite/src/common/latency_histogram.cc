#include "halite/latency_histogram.h"

#include <bit>

namespace halite {

LatencyHistogram::LatencyHistogram() {
  for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
}

int LatencyHistogram::BucketOf(uint64_t ns) {
  if (ns < uint64_t(kSub)) return int(ns);
  int e = 63 - std::countl_zero(ns);  // e >= kSubBits
  int sub = int((ns >> (e - kSubBits)) & (kSub - 1));
  return kSub + (e - kSubBits) * kSub + sub;
}

uint64_t LatencyHistogram::BucketLow(int bucket) {
  if (bucket < kSub) return uint64_t(bucket);
  int e = (bucket - kSub) / kSub + kSubBits;
  uint64_t sub = uint64_t((bucket - kSub) % kSub);
  return (uint64_t{1} << e) | (sub << (e - kSubBits));
}

uint64_t LatencyHistogram::BucketHigh(int bucket) {
  if (bucket < kSub) return uint64_t(bucket);
  int e = (bucket - kSub) / kSub + kSubBits;
  return BucketLow(bucket) + (uint64_t{1} << (e - kSubBits)) - 1;
}

void LatencyHistogram::Record(uint64_t ns) {
  counts_[size_t(BucketOf(ns))].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(ns, std::memory_order_relaxed);
  uint64_t m = max_.load(std::memory_order_relaxed);
  while (ns > m && !max_.compare_exchange_weak(m, ns, std::memory_order_relaxed)) {
  }
}

LatencySummary LatencyHistogram::Summary() const {
  LatencySummary s;
  // Counts are read bucket by bucket while others may record: the total is taken from the buckets themselves
  // so the percentiles are consistent with what was read.
  std::array<uint64_t, kBuckets> c;
  uint64_t total = 0;
  for (int i = 0; i < kBuckets; ++i) {
    c[size_t(i)] = counts_[size_t(i)].load(std::memory_order_relaxed);
    total += c[size_t(i)];
  }
  s.count = total;
  s.max_ns = max_.load(std::memory_order_relaxed);
  if (total == 0) return s;
  s.mean_ns = double(sum_.load(std::memory_order_relaxed)) / double(count_.load(std::memory_order_relaxed));
  auto quantile = [&](double q) -> uint64_t {
    // The smallest bucket whose cumulative count reaches rank ceil(q * total); report its midpoint, capped
    // by the exact maximum.
    uint64_t rank = uint64_t(q * double(total));
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += c[size_t(i)];
      if (seen >= rank) {
        uint64_t mid = BucketLow(i) + (BucketHigh(i) - BucketLow(i)) / 2;
        return mid < s.max_ns ? mid : s.max_ns;
      }
    }
    return s.max_ns;
  };
  s.p50_ns = quantile(0.50);
  s.p90_ns = quantile(0.90);
  s.p99_ns = quantile(0.99);
  return s;
}

}  // namespace halite
