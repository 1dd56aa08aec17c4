#include "halite/qemu/qemu_byte_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

}  // namespace halite::qemu
