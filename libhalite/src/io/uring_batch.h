// io_uring, behind a narrow interface. The only file that includes liburing.h is uring_batch.cc; without
// liburing at build time (or when the kernel refuses a ring) Create() returns null and callers fall back to
// pread/pwrite.
#ifndef HALITE_IO_URING_BATCH_H_
#define HALITE_IO_URING_BATCH_H_

#include <memory>
#include <span>
#include <string>

#include "halite/status.h"
#include "halite/storage.h"

namespace halite::io {

// Submits a batch of positional reads in one io_uring_submit and waits for all. Not thread-safe.
class UringBatchReader {
 public:
  static std::unique_ptr<UringBatchReader> Create(int fd);
  virtual ~UringBatchReader() = default;
  // Fills every request (resubmitting short reads); sets each request's status; returns the first error.
  virtual Status Read(std::span<ReadRequest> requests, const std::string& name) = 0;
};

// Appends at increasing offsets with up to a fixed number of writes in flight. Not thread-safe.
class UringAppender {
 public:
  static std::unique_ptr<UringAppender> Create(int fd);
  virtual ~UringAppender() = default;
  // Queues a copy of `data` to be written at `offset`.
  virtual Status Write(uint64_t offset, std::span<const uint8_t> data, const std::string& name) = 0;
  // Waits until every queued write has completed.
  virtual Status Drain(const std::string& name) = 0;
};

bool UringAvailable();

}  // namespace halite::io

#endif  // HALITE_IO_URING_BATCH_H_
