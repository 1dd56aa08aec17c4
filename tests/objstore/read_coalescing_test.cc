// How a batch of reads becomes requests to an object store (objstore/read_coalescing.h): adjacent and nearly
// adjacent reads joined, never past the length limit, overlapping ones kept apart, every read in exactly one
// request.
#include <catch2/catch.hpp>

#include <vector>

#include "objstore/read_coalescing.h"

using namespace halite;
using namespace halite::objstore;

namespace {

std::vector<ReadRequest> Requests(std::vector<std::pair<uint64_t, size_t>> ranges, std::vector<uint8_t>& storage) {
  size_t total = 0;
  for (auto& [o, n] : ranges) total += n;
  storage.resize(total);
  std::vector<ReadRequest> out;
  size_t at = 0;
  for (auto& [o, n] : ranges) {
    out.push_back(ReadRequest{o, std::span<uint8_t>(storage.data() + at, n), {}});
    at += n;
  }
  return out;
}

}  // namespace

TEST_CASE("adjacent reads are joined up to the length limit in offset order", "[objstore][coalescing]") {
  std::vector<uint8_t> buf;
  // Given out of order: 300-400, 0-100, 100-200, 200-300, 1000-1100.
  auto reqs = Requests({{300, 100}, {0, 100}, {100, 100}, {200, 100}, {1000, 100}}, buf);
  auto got = CoalesceReads(reqs, CoalescingLimits{0, 250});
  REQUIRE(got.size() == 3);
  CHECK(got[0].offset == 0);
  CHECK(got[0].length == 200);
  REQUIRE(got[0].parts.size() == 2);
  CHECK(got[0].parts[0] == &reqs[1]);
  CHECK(got[0].parts[1] == &reqs[2]);
  CHECK(got[1].offset == 200);
  CHECK(got[1].length == 200);
  CHECK(got[2].offset == 1000);
  CHECK(got[2].parts.size() == 1);
}

TEST_CASE("a small gap is read through but not a large one and overlapping reads are never joined",
          "[objstore][coalescing]") {
  std::vector<uint8_t> buf;
  auto reqs = Requests({{0, 100}, {150, 100}, {400, 100}, {450, 100}}, buf);
  auto got = CoalesceReads(reqs, CoalescingLimits{64, 1 << 20});
  // 0-100 and 150-250 join (gap 50); 400-500 is too far; 450-550 overlaps it.
  REQUIRE(got.size() == 3);
  CHECK(got[0].offset == 0);
  CHECK(got[0].length == 250);
  CHECK(got[0].parts.size() == 2);
  CHECK(got[1].offset == 400);
  CHECK(got[1].length == 100);
  CHECK(got[2].offset == 450);
  size_t parts = 0;
  for (const auto& g : got) {
    parts += g.parts.size();
    for (const ReadRequest* p : g.parts) {
      CHECK(p->offset >= g.offset);
      CHECK(p->offset + p->buffer.size() <= g.offset + g.length);
    }
  }
  CHECK(parts == reqs.size());
  // The same range twice: two requests, each filling its own buffer.
  auto twice = Requests({{0, 100}, {0, 100}}, buf);
  CHECK(CoalesceReads(twice, CoalescingLimits{64, 1 << 20}).size() == 2);
}

TEST_CASE("a read larger than the limit is a request of its own and empty reads are left out", "[objstore][coalescing]") {
  std::vector<uint8_t> buf;
  auto reqs = Requests({{0, 500}, {500, 10}, {510, 0}}, buf);
  auto got = CoalesceReads(reqs, CoalescingLimits{0, 100});
  REQUIRE(got.size() == 2);
  CHECK(got[0].length == 500);
  CHECK(got[1].offset == 500);
}

TEST_CASE("batch limits share a batch between the requests in flight within bounds", "[objstore][coalescing]") {
  CHECK(LimitsForBatch(8 << 20, 8, 256 << 10, 1 << 20, 64).max_length == (1 << 20));
  CHECK(LimitsForBatch(2 << 20, 8, 256 << 10, 1 << 20, 64).max_length == (256 << 10));
  CHECK(LimitsForBatch(64 << 20, 8, 256 << 10, 1 << 20, 64).max_length == (1 << 20));
  CHECK(LimitsForBatch(100, 8, 256 << 10, 1 << 20, 64).max_length == (256 << 10));
  CHECK(LimitsForBatch(100, 8, 256 << 10, 1 << 20, 64).max_gap == 64);
}
