// The byte streams everyone needs: a file descriptor read or written front to back (a pipe, a socket, a FIFO,
// standard input or output: a VMM's save or migration stream), and memory (tests, fuzzers, records built in
// memory). They implement SequentialSource / SequentialSink (storage.h). None is thread-safe: one thread uses
// one object at a time; a socket may be read by one thread while another writes it (two objects, one fd).
#ifndef HALITE_BYTE_STREAMS_H_
#define HALITE_BYTE_STREAMS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "halite/export.h"
#include "halite/status.h"
#include "halite/storage.h"

namespace halite {

struct FdSourceOptions {
  std::string name = "input stream";  // appears in every error
  // 0: every ReadSome is one read(2) (for a caller that buffers itself). Otherwise reads shorter than this are
  // served from a buffer of this size, so small header reads do not each become a system call.
  size_t buffer_size = 0;
  // > 0: a read that sees no byte for this long fails (kIoError, retryable) instead of blocking forever.
  int idle_timeout_ms = 0;
  // Not null: once it becomes true, a pending read fails with kAborted within ~50 ms.
  const std::atomic<bool>* stop = nullptr;
};

// Reads a file descriptor it borrows (the caller closes it, after the source is gone). Retries EINTR.
class HALITE_EXPORT FdSource final : public SequentialSource {
 public:
  explicit FdSource(int fd, FdSourceOptions options = {});
  Result<size_t> ReadSome(void* buf, size_t len) override;

 private:
  Result<size_t> ReadFd(void* buf, size_t len);

  int fd_;
  FdSourceOptions options_;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0;  // first unread byte of buf_
  size_t len_ = 0;  // bytes valid in buf_
  uint64_t offset_ = 0;  // bytes read from the fd so far, for errors
};

struct FdSinkOptions {
  std::string name = "output stream";  // appears in every error, with the stream offset
  size_t buffer_size = 256 * 1024;     // small writes are gathered up to this; larger ones go straight out
  // > 0: a write that makes no progress for this long fails (a peer that stopped reading).
  int stall_timeout_ms = 0;
};

// Writes a file descriptor it borrows, buffering small writes. Sockets are written with MSG_NOSIGNAL, so a peer
// that died gives kIoError (EPIPE) rather than SIGPIPE. Flush() before closing the fd: the destructor drops
// unflushed bytes (it could not report an error).
class HALITE_EXPORT FdSink final : public SequentialSink {
 public:
  explicit FdSink(int fd, FdSinkOptions options = {});
  Status Write(const void* data, size_t len) override;
  Status Flush() override;
  // Bytes handed to the fd so far (not counting what is still buffered).
  uint64_t bytes_written() const { return written_; }

 private:
  Status WriteOut(const uint8_t* data, size_t len);

  int fd_;
  FdSinkOptions options_;
  bool is_socket_;
  std::vector<uint8_t> buf_;
  size_t used_ = 0;
  uint64_t written_ = 0;
};

// Reads a span it borrows (it must outlive the source). At most max_chunk bytes per read, which lets tests put
// record boundaries between reads.
class HALITE_EXPORT MemorySource final : public SequentialSource {
 public:
  explicit MemorySource(std::span<const uint8_t> data, size_t max_chunk = SIZE_MAX)
      : data_(data), max_chunk_(max_chunk) {}
  explicit MemorySource(std::string_view data, size_t max_chunk = SIZE_MAX)
      : MemorySource(std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()), max_chunk) {}
  Result<size_t> ReadSome(void* buf, size_t len) override;

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  size_t max_chunk_;
};

// Appends to memory it owns.
class HALITE_EXPORT VectorSink final : public SequentialSink {
 public:
  Status Write(const void* data, size_t len) override;
  const std::vector<uint8_t>& data() const { return data_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_.data()), data_.size()}; }
  std::vector<uint8_t> Take() { return std::move(data_); }

 private:
  std::vector<uint8_t> data_;
};

}  // namespace halite

#endif  // HALITE_BYTE_STREAMS_H_
