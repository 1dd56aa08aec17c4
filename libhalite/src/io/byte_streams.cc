#include "halite/byte_streams.h"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "io/posix_io.h"

namespace halite {

FdSource::FdSource(int fd, FdSourceOptions options) : fd_(fd), options_(std::move(options)) {
  buf_.resize(options_.buffer_size);
}

Result<size_t> FdSource::ReadFd(void* buf, size_t len) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const bool watch = options_.stop != nullptr || options_.idle_timeout_ms > 0;
  for (;;) {
    if (watch) {
      // Poll in short slices so that a stop request or the idle timeout is noticed while the peer is silent.
      pollfd pfd{fd_, POLLIN, 0};
      const int pr = poll(&pfd, 1, 50);
      if (pr < 0) {
        if (errno == EINTR) continue;
        return Status::IoError(fmt::format("{}: offset {:#x}: poll failed", options_.name, offset_), errno);
      }
      if (pr == 0) {
        if (options_.stop != nullptr && options_.stop->load(std::memory_order_relaxed)) {
          return Status::Aborted(options_.name + ": read stopped on request");
        }
        if (options_.idle_timeout_ms > 0 && Clock::now() - start > std::chrono::milliseconds(options_.idle_timeout_ms)) {
          return Status::IoError(fmt::format("{}: offset {:#x}: no data for {} ms (peer stalled)", options_.name,
                                             offset_, options_.idle_timeout_ms))
              .set_retryable(true);
        }
        continue;
      }
    }
    const ssize_t n = ::read(fd_, buf, len);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::IoError(fmt::format("{}: offset {:#x}: read failed", options_.name, offset_), errno);
    }
    offset_ += uint64_t(n);
    return size_t(n);
  }
}

Result<size_t> FdSource::ReadSome(void* buf, size_t len) {
  if (len == 0) return size_t{0};
  if (pos_ == len_) {
    // Reads as large as the buffer bypass it: one copy less for page data.
    if (len >= buf_.size()) return ReadFd(buf, len);
    HLT_ASSIGN_OR_RETURN(size_t got, ReadFd(buf_.data(), buf_.size()));
    pos_ = 0;
    len_ = got;
    if (got == 0) return size_t{0};
  }
  const size_t take = std::min(len, len_ - pos_);
  std::memcpy(buf, buf_.data() + pos_, take);
  pos_ += take;
  return take;
}

FdSink::FdSink(int fd, FdSinkOptions options) : fd_(fd), options_(std::move(options)) {
  struct stat st;
  is_socket_ = fstat(fd_, &st) == 0 && S_ISSOCK(st.st_mode);
  buf_.resize(options_.buffer_size);
}

Status FdSink::WriteOut(const uint8_t* data, size_t len) {
  uint64_t sent = 0;
  Status s = io::WriteStreamFull(fd_, is_socket_, std::span(data, len), options_.name, written_,
                                 options_.stall_timeout_ms, &sent);
  written_ += sent;
  return s;
}

Status FdSink::Write(const void* data, size_t len) {
  if (len == 0) return Status::Ok();  // data may be null for an empty write; memcpy must not see it
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (used_ + len > buf_.size()) {
    HLT_RETURN_IF_ERROR(Flush());
    if (len >= buf_.size()) return WriteOut(bytes, len);
  }
  std::memcpy(buf_.data() + used_, bytes, len);
  used_ += len;
  return Status::Ok();
}

Status FdSink::Flush() {
  if (used_ == 0) return Status::Ok();
  const size_t n = used_;
  used_ = 0;
  return WriteOut(buf_.data(), n);
}

Result<size_t> MemorySource::ReadSome(void* buf, size_t len) {
  const size_t n = std::min({len, data_.size() - pos_, max_chunk_});
  if (n > 0) std::memcpy(buf, data_.data() + pos_, n);
  pos_ += n;
  return n;
}

Status VectorSink::Write(const void* data, size_t len) {
  if (len == 0) return Status::Ok();
  const auto* p = static_cast<const uint8_t*>(data);
  data_.insert(data_.end(), p, p + len);
  return Status::Ok();
}

}  // namespace halite
