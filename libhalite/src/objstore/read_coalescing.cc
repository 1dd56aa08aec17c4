#include "objstore/read_coalescing.h"

#include <algorithm>

namespace halite::objstore {

std::vector<CoalescedRead> CoalesceReads(std::span<ReadRequest> requests, const CoalescingLimits& limits) {
  std::vector<ReadRequest*> sorted;
  sorted.reserve(requests.size());
  for (ReadRequest& r : requests) {
    if (!r.buffer.empty()) sorted.push_back(&r);
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const ReadRequest* a, const ReadRequest* b) { return a->offset < b->offset; });
  std::vector<CoalescedRead> out;
  for (ReadRequest* r : sorted) {
    const uint64_t end = r->offset + r->buffer.size();
    if (!out.empty()) {
      CoalescedRead& last = out.back();
      const uint64_t last_end = last.offset + last.length;
      // Overlapping parts are never joined: each byte of a request goes to exactly one part.
      const bool joins = r->offset >= last_end && r->offset - last_end <= limits.max_gap &&
                         end - last.offset <= limits.max_length;
      if (joins) {
        last.length = end - last.offset;
        last.parts.push_back(r);
        continue;
      }
    }
    out.push_back(CoalescedRead{r->offset, r->buffer.size(), {r}});
  }
  return out;
}

CoalescingLimits LimitsForBatch(uint64_t total_bytes, unsigned in_flight, uint64_t min_length, uint64_t max_length,
                                uint64_t max_gap) {
  const uint64_t share = total_bytes / std::max(1u, in_flight);
  return CoalescingLimits{max_gap, std::clamp(share, min_length, std::max(min_length, max_length))};
}

}  // namespace halite::objstore
