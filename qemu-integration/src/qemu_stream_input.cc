#include "halite/qemu/qemu_stream_input.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "halite/bytes.h"

namespace halite::qemu {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
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

namespace {

uint8_t LoadU8(const uint8_t* p) { return p[0]; }

template <typename T, T (*Load)(const uint8_t*)>
Result<T> ReadFixed(StreamInput& in, const char* what) {
  HLT_ASSIGN_OR_RETURN(const uint8_t* p, in.Need(sizeof(T), what));
  const T v = Load(p);
  in.Consume(sizeof(T));
  return v;
}

}  // namespace

Result<uint8_t> StreamInput::U8(const char* what) { return ReadFixed<uint8_t, LoadU8>(*this, what); }
Result<uint16_t> StreamInput::Be16(const char* what) { return ReadFixed<uint16_t, LoadBe16>(*this, what); }
Result<uint32_t> StreamInput::Be32(const char* what) { return ReadFixed<uint32_t, LoadBe32>(*this, what); }
Result<uint64_t> StreamInput::Be64(const char* what) { return ReadFixed<uint64_t, LoadBe64>(*this, what); }

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

}  // namespace halite::qemu
