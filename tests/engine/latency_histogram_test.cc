#include "halite/latency_histogram.h"

#include <catch2/catch.hpp>
#include <random>

using halite::LatencyHistogram;

TEST_CASE("histogram buckets tile the values without gaps", "[engine][stats]") {
  for (int b = 0; b + 1 < LatencyHistogram::kBuckets; ++b) {
    INFO("bucket " << b);
    REQUIRE(LatencyHistogram::BucketHigh(b) + 1 == LatencyHistogram::BucketLow(b + 1));
    REQUIRE(LatencyHistogram::BucketOf(LatencyHistogram::BucketLow(b)) == b);
    REQUIRE(LatencyHistogram::BucketOf(LatencyHistogram::BucketHigh(b)) == b);
  }
  CHECK(LatencyHistogram::BucketOf(UINT64_MAX) == LatencyHistogram::kBuckets - 1);
}

TEST_CASE("histogram percentiles are within a bucket of the exact ones", "[engine][stats]") {
  LatencyHistogram h;
  std::vector<uint64_t> v;
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> d(10.0, 1.5);  // microseconds to tens of milliseconds, in ns
  for (int i = 0; i < 100000; ++i) {
    uint64_t x = uint64_t(d(rng));
    v.push_back(x);
    h.Record(x);
  }
  std::sort(v.begin(), v.end());
  auto s = h.Summary();
  CHECK(s.count == v.size());
  CHECK(s.max_ns == v.back());
  auto near = [](uint64_t got, uint64_t want) {
    return double(got) >= double(want) * 0.93 && double(got) <= double(want) * 1.07;
  };
  CHECK(near(s.p50_ns, v[v.size() / 2]));
  CHECK(near(s.p99_ns, v[v.size() * 99 / 100]));
  LatencyHistogram empty;
  CHECK(empty.Summary().count == 0);
  CHECK(empty.Summary().p99_ns == 0);
}
