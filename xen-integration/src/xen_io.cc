#include "halite/xen/xen_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace halite::xen {

FdByteSource::FdByteSource(int fd, size_t buffer_size) : fd_(fd), buf_(buffer_size) {}

Result<size_t> FdByteSource::ReadSome(void* buf, size_t n) {
  if (n == 0) return size_t{0};
  if (pos_ == len_) {
    // Large reads (page data) bypass the buffer: one copy less.
    void* dst = n >= buf_.size() ? buf : buf_.data();
    size_t want = n >= buf_.size() ? n : buf_.size();
    ssize_t got;
    do {
      got = ::read(fd_, dst, want);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
      int e = errno;
      return Status::IoError(std::string("read failed: ") + std::strerror(e), e);
    }
    if (dst == buf) return static_cast<size_t>(got);
    pos_ = 0;
    len_ = static_cast<size_t>(got);
    if (len_ == 0) return size_t{0};
  }
  size_t take = std::min(n, len_ - pos_);
  std::memcpy(buf, buf_.data() + pos_, take);
  pos_ += take;
  return take;
}

FdByteSink::FdByteSink(int fd, size_t buffer_size) : fd_(fd), buf_(buffer_size) {}

Status FdByteSink::WriteAll(const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd_, p, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      return Status::IoError(std::string("write failed: ") + std::strerror(e), e);
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  return Status::Ok();
}

Status FdByteSink::Write(const void* buf, size_t n) {
  if (n == 0) return Status::Ok();  // buf may be null for an empty write; memcpy must not see it
  const auto* p = static_cast<const uint8_t*>(buf);
  if (len_ + n <= buf_.size()) {
    std::memcpy(buf_.data() + len_, p, n);
    len_ += n;
    return Status::Ok();
  }
  HLT_RETURN_IF_ERROR(Flush());
  if (n >= buf_.size()) return WriteAll(p, n);
  std::memcpy(buf_.data(), p, n);
  len_ = n;
  return Status::Ok();
}

Status FdByteSink::Flush() {
  Status s = WriteAll(buf_.data(), len_);
  len_ = 0;
  return s;
}

Result<size_t> MemoryByteSource::ReadSome(void* buf, size_t n) {
  size_t take = std::min(n, data_.size() - pos_);
  if (take) std::memcpy(buf, data_.data() + pos_, take);
  pos_ += take;
  return take;
}

Status VectorByteSink::Write(const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  data_.insert(data_.end(), p, p + n);
  return Status::Ok();
}

}  // namespace halite::xen
