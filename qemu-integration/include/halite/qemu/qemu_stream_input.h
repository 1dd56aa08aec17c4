// Reading QEMU's migration streams record by record, and the descriptors that carry them. The byte streams
// themselves (file descriptors, memory) are the library's: halite/byte_streams.h; byte order is halite/bytes.h.
//
// A migration channel is a stream: nothing here ever seeks. StreamInput keeps a buffer so parsers can look at a
// whole record at once without copying. Not thread-safe.
#ifndef HALITE_QEMU_QEMU_STREAM_INPUT_H_
#define HALITE_QEMU_QEMU_STREAM_INPUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halite/status.h"
#include "halite/byte_streams.h"
#include "halite/storage.h"

namespace halite::qemu {

// Buffered forward reader over a SequentialSource it borrows. Tracks the absolute stream offset for error messages.
class StreamInput {
 public:
  // name appears in every error ("migration stream", "return path").
  StreamInput(SequentialSource* source, std::string name, size_t initial_buffer = 256 * 1024);

  // Makes n bytes available and returns a pointer to them (valid until the next Need/Consume); an error when
  // the stream ends first: "<name>: offset 0x..: unexpected end of stream reading <what> (n bytes)".
  Result<const uint8_t*> Need(size_t n, const char* what);
  void Consume(size_t n);
  // Need + Consume for fixed-width big-endian integers.
  Result<uint8_t> U8(const char* what);
  Result<uint16_t> Be16(const char* what);
  Result<uint32_t> Be32(const char* what);
  Result<uint64_t> Be64(const char* what);
  // Copies n bytes into out (appending).
  Status Bytes(size_t n, const char* what, std::string* out);
  // True when no byte is left (reads ahead to find out).
  Result<bool> AtEnd();
  // Appends everything up to the end of the stream to out; fails past limit bytes.
  Status ReadToEnd(std::string* out, size_t limit, const char* what);

  uint64_t offset() const { return offset_; }
  const std::string& name() const { return name_; }
  // "<name>: offset 0x1f00: <message>" as a corrupt Status at the current offset (or at `at`).
  Status CorruptAt(uint64_t at, const std::string& message) const;
  Status Corrupt(const std::string& message) const { return CorruptAt(offset_, message); }

 private:
  Status Fill(size_t n, const char* what);

  SequentialSource* source_;
  std::string name_;
  std::vector<uint8_t> buf_;
  size_t begin_ = 0;  // first unread byte in buf_
  size_t end_ = 0;    // one past the last valid byte in buf_
  uint64_t offset_ = 0;
  bool eof_ = false;
};

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_STREAM_INPUT_H_
