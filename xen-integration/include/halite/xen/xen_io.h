// Byte sources and sinks for the Xen stream codec.
//
// A save stream arrives on a pipe, a FIFO, standard input or a file, and leaves the same way, so the codec only
// ever reads forward and appends: it never seeks. These small interfaces are all it needs; the fd versions
// serve files, FIFOs and stdin/stdout, the memory versions serve tests and fuzzing.
// None of these classes is thread-safe; use one from one thread at a time.
#ifndef HALITE_XEN_XEN_IO_H_
#define HALITE_XEN_XEN_IO_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "halite/status.h"
#include "halite/storage.h"

namespace halite::xen {

// Reads from a file descriptor the caller owns and keeps open while this object lives. Buffers internally so
// the codec's small header reads do not each become a system call; retries EINTR.
class FdByteSource final : public SequentialSource {
 public:
  explicit FdByteSource(int fd, size_t buffer_size = 256 * 1024);
  Result<size_t> ReadSome(void* buf, size_t n) override;

 private:
  int fd_;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0;
  size_t len_ = 0;
};

// Writes to a file descriptor the caller owns. Buffers small writes; large writes go straight through.
// Flush() before closing the fd; the destructor does not flush (it could not report an error).
class FdByteSink final : public SequentialSink {
 public:
  explicit FdByteSink(int fd, size_t buffer_size = 256 * 1024);
  Status Write(const void* buf, size_t n) override;
  Status Flush() override;

 private:
  Status WriteAll(const uint8_t* p, size_t n);
  int fd_;
  std::vector<uint8_t> buf_;
  size_t len_ = 0;
};

// Reads from memory borrowed from the caller, which must outlive this object.
class MemoryByteSource final : public SequentialSource {
 public:
  explicit MemoryByteSource(std::span<const uint8_t> data) : data_(data) {}
  Result<size_t> ReadSome(void* buf, size_t n) override;

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

// Appends to a vector it owns.
class VectorByteSink final : public SequentialSink {
 public:
  Status Write(const void* buf, size_t n) override;
  const std::vector<uint8_t>& data() const { return data_; }
  std::vector<uint8_t> Take() { return std::move(data_); }

 private:
  std::vector<uint8_t> data_;
};

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_IO_H_
