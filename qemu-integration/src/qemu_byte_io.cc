#include "halite/qemu/qemu_byte_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

namespace halite::qemu {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

void PutU8(std::string* out, uint8_t v) { out->push_back(static_cast<char>(v)); }
void PutBe16(std::string* out, uint16_t v) {
  PutU8(out, v >> 8);
  PutU8(out, v & 0xff);
}
void PutBe32(std::string* out, uint32_t v) {
  PutBe16(out, v >> 16);
  PutBe16(out, v & 0xffff);
}
void PutBe64(std::string* out, uint64_t v) {
  PutBe32(out, static_cast<uint32_t>(v >> 32));
  PutBe32(out, static_cast<uint32_t>(v));
}

Result<size_t> FdSource::ReadSome(void* buf, size_t len) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (;;) {
    // Poll in short slices so a stop request or the idle timeout is noticed even when the peer is silent.
    const int slice = (stop_ != nullptr || idle_timeout_ms_ > 0) ? 50 : -1;
    pollfd pfd{fd_, POLLIN, 0};
    const int pr = poll(&pfd, 1, slice);
    if (pr < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("poll", errno);
    }
    if (pr == 0) {
      if (stop_ != nullptr && stop_->load(std::memory_order_relaxed)) return Status::Aborted("read stopped on request");
      if (idle_timeout_ms_ > 0 &&
          Clock::now() - start > std::chrono::milliseconds(idle_timeout_ms_)) {
        return Status::IoError("no data for " + std::to_string(idle_timeout_ms_) + " ms (peer stalled)")
            .set_retryable(true);
      }
      continue;
    }
    const ssize_t n = read(fd_, buf, len);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::IoError("read", errno);
    }
    return static_cast<size_t>(n);
  }
}

Result<size_t> MemorySource::ReadSome(void* buf, size_t len) {
  const size_t n = std::min({len, data_.size() - pos_, max_chunk_});
  if (n > 0) memcpy(buf, data_.data() + pos_, n);
  pos_ += n;
  return n;
}

StreamInput::StreamInput(SequentialSource* source, std::string name, size_t initial_buffer)
    : source_(source), name_(std::move(name)), buf_(std::max<size_t>(initial_buffer, 64)) {}

Status StreamInput::CorruptAt(uint64_t at, const std::string& message) const {
  return Status::Corrupt(name_ + ": offset " + fmt::format("{:#x}", at) + ": " + message);
}

Status StreamInput::Fill(size_t n, const char* what) {
  if (end_ - begin_ >= n) return Status::Ok();
  // Compact, then grow if one record needs more than the buffer holds.
  if (begin_ > 0) {
    memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buf_.size() < n) buf_.resize(std::max(n, buf_.size() * 2));
  while (end_ < n) {
    if (eof_) {
      return CorruptAt(offset_, std::string("unexpected end of stream reading ") + what + " (" +
                                    std::to_string(n) + " bytes, " + std::to_string(end_) + " available)");
    }
    auto got = source_->ReadSome(buf_.data() + end_, buf_.size() - end_);
    if (!got.has_value()) {
      const Status& e = got.error();
      return Status(e.code(), name_ + ": offset " + fmt::format("{:#x}", offset_ + end_) + ": reading " + what + ": " + e.message(),
                    e.sys_errno());
    }
    if (*got == 0) {
      eof_ = true;
      continue;
    }
    end_ += *got;
  }
  return Status::Ok();
}

Result<const uint8_t*> StreamInput::Need(size_t n, const char* what) {
  HLT_RETURN_IF_ERROR(Fill(n, what));
  return static_cast<const uint8_t*>(buf_.data() + begin_);
}

void StreamInput::Consume(size_t n) {
  assert(end_ - begin_ >= n);
  begin_ += n;
  offset_ += n;
}

Result<uint8_t> StreamInput::U8(const char* what) {
  HLT_ASSIGN_OR_RETURN(const uint8_t* p, Need(1, what));
  const uint8_t v = p[0];
  Consume(1);
  return v;
}
Result<uint16_t> StreamInput::Be16(const char* what) {
  HLT_ASSIGN_OR_RETURN(const uint8_t* p, Need(2, what));
  const uint16_t v = LoadBe16(p);
  Consume(2);
  return v;
}
Result<uint32_t> StreamInput::Be32(const char* what) {
  HLT_ASSIGN_OR_RETURN(const uint8_t* p, Need(4, what));
  const uint32_t v = LoadBe32(p);
  Consume(4);
  return v;
}
Result<uint64_t> StreamInput::Be64(const char* what) {
  HLT_ASSIGN_OR_RETURN(const uint8_t* p, Need(8, what));
  const uint64_t v = LoadBe64(p);
  Consume(8);
  return v;
}

Status StreamInput::Bytes(size_t n, const char* what, std::string* out) {
  // Large copies go through in buffer-sized pieces so a huge length cannot force a huge allocation up front.
  while (n > 0) {
    const size_t piece = std::min<size_t>(n, 1 << 20);
    HLT_ASSIGN_OR_RETURN(const uint8_t* p, Need(piece, what));
    out->append(reinterpret_cast<const char*>(p), piece);
    Consume(piece);
    n -= piece;
  }
  return Status::Ok();
}

Result<bool> StreamInput::AtEnd() {
  if (end_ > begin_) return false;
  Status s = Fill(1, "the next record");
  if (s.ok()) return false;
  if (eof_ && end_ == begin_) return true;
  return s;
}

Status StreamInput::ReadToEnd(std::string* out, size_t limit, const char* what) {
  const uint64_t start = offset_;
  for (;;) {
    HLT_ASSIGN_OR_RETURN(bool at_end, AtEnd());
    if (at_end) return Status::Ok();
    const size_t avail = end_ - begin_;
    if (offset_ - start + avail > limit) {
      return CorruptAt(start, std::string(what) + " longer than the limit of " + std::to_string(limit) + " bytes");
    }
    out->append(reinterpret_cast<const char*>(buf_.data() + begin_), avail);
    Consume(avail);
  }
}

FdSink::FdSink(int fd, std::string name, size_t buffer_size, int stall_timeout_ms)
    : fd_(fd), name_(std::move(name)), capacity_(std::max<size_t>(buffer_size, 4096)),
      stall_timeout_ms_(stall_timeout_ms) {
  buf_.resize(capacity_);
}

Status FdSink::Write(const void* data, size_t len) {
  if (len == 0) return Status::Ok();  // data may be null for an empty write; memcpy must not see it
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (used_ + len > capacity_) {
    HLT_RETURN_IF_ERROR(Flush());
    if (len >= capacity_) return WriteAll(bytes, len);
  }
  memcpy(buf_.data() + used_, bytes, len);
  used_ += len;
  return Status::Ok();
}

Status FdSink::Flush() {
  if (used_ == 0) return Status::Ok();
  const size_t n = used_;
  used_ = 0;
  return WriteAll(buf_.data(), n);
}

Status FdSink::WriteAll(const uint8_t* data, size_t len) {
  if (is_socket_ < 0) {
    struct stat st;
    is_socket_ = (fstat(fd_, &st) == 0 && S_ISSOCK(st.st_mode)) ? 1 : 0;
  }
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  while (len > 0) {
    pollfd pfd{fd_, POLLOUT, 0};
    const int pr = poll(&pfd, 1, 100);
    if (pr < 0 && errno != EINTR) return Status::IoError(name_ + ": offset " + fmt::format("{:#x}", written_) + ": poll", errno);
    if (pr <= 0) {
      if (stall_timeout_ms_ > 0 && Clock::now() - last_progress > std::chrono::milliseconds(stall_timeout_ms_)) {
        return Status::IoError(name_ + ": offset " + fmt::format("{:#x}", written_) + ": peer stopped reading for " +
                               std::to_string(stall_timeout_ms_) + " ms");
      }
      continue;
    }
    const ssize_t n = is_socket_ ? send(fd_, data, len, MSG_NOSIGNAL | MSG_DONTWAIT) : write(fd_, data, len);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::IoError(name_ + ": offset " + fmt::format("{:#x}", written_) + ": write", errno);
    }
    data += n;
    len -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
    last_progress = Clock::now();
  }
  return Status::Ok();
}

}  // namespace halite::qemu
