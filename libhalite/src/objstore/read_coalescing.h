// Shapes a batch of reads for an object store, where every request pays a round trip and the server's per-request
// CPU: neighbouring ranges go out as one larger request, cut so that the batch still keeps several requests in
// flight. Pure computation, no I/O (s3_storage.cc and rados_storage.cc use it; tests check it directly).
#ifndef HALITE_OBJSTORE_READ_COALESCING_H_
#define HALITE_OBJSTORE_READ_COALESCING_H_

#include <cstdint>
#include <span>
#include <vector>

#include "halite/storage.h"

namespace halite::objstore {

// One request to storage covering [offset, offset + length): the requests in `parts` (offset order, never
// overlapping) lie inside it; bytes between them are read and thrown away.
struct CoalescedRead {
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<ReadRequest*> parts;
};

struct CoalescingLimits {
  // Parts further apart than this are not joined: reading the gap would cost more than another request.
  uint64_t max_gap = 0;
  // A joined request stops growing at this many bytes (a single part larger than this is a request of its own).
  uint64_t max_length = 0;
};

// Groups `requests` (any order; empty buffers are left out) into requests to storage, in offset order.
std::vector<CoalescedRead> CoalesceReads(std::span<ReadRequest> requests, const CoalescingLimits& limits);

// The limits for a batch of `total_bytes` sent `in_flight` requests at a time: requests of about
// total_bytes / in_flight (so that every slot has work), at least `min_length` and at most `max_length` bytes.
CoalescingLimits LimitsForBatch(uint64_t total_bytes, unsigned in_flight, uint64_t min_length, uint64_t max_length,
                                uint64_t max_gap);

}  // namespace halite::objstore

#endif  // HALITE_OBJSTORE_READ_COALESCING_H_
