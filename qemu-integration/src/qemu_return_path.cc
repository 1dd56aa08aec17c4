#include "halite/qemu/qemu_return_path.h"

#include <algorithm>

#include <fmt/format.h>

#include "halite/bytes.h"

namespace halite::qemu {

uint64_t MaxRecvBitmapBytes(const std::vector<RamBlockInfo>& blocks) {
  uint64_t most = 0;
  for (const auto& b : blocks) most = std::max(most, (b.page_count() + 63) / 64 * 8);
  return most;
}

ReturnPathReader::ReturnPathReader(SequentialSource* source, std::string name, uint64_t max_bitmap_bytes)
    : in_(source, std::move(name), 4096), max_bitmap_bytes_(max_bitmap_bytes) {}

Result<std::optional<ReturnPathMessage>> ReturnPathReader::Next() {
  HLT_ASSIGN_OR_RETURN(bool at_end, in_.AtEnd());
  if (at_end) return std::optional<ReturnPathMessage>();
  ReturnPathMessage m;
  m.stream_offset = in_.offset();
  HLT_ASSIGN_OR_RETURN(uint16_t type, in_.Be16("message type"));
  HLT_ASSIGN_OR_RETURN(uint16_t len, in_.Be16("message length"));
  auto bad_len = [&](const std::string& expected) {
    return in_.CorruptAt(m.stream_offset, std::string(ReturnPathTypeName(type)) + " message length " +
                                              std::to_string(len) + " (expected " + expected + ")");
  };
  HLT_ASSIGN_OR_RETURN(const uint8_t* p, in_.Need(len, "message payload"));
  m.type = static_cast<ReturnPathType>(type);
  switch (m.type) {
    case ReturnPathType::kShut:
    case ReturnPathType::kPong:
    case ReturnPathType::kResumeAck:
      if (len != 4) return bad_len("4");
      m.value = LoadBe32(p);
      in_.Consume(len);
      return std::optional(std::move(m));
    case ReturnPathType::kReqPages:
      if (len != 12) return bad_len("12");
      if (!have_block_) return in_.CorruptAt(m.stream_offset, "REQ_PAGES before any REQ_PAGES_ID named a block");
      m.offset = LoadBe64(p);
      m.length = LoadBe32(p + 8);
      m.block_name = last_block_;
      in_.Consume(len);
      break;
    case ReturnPathType::kReqPagesId: {
      if (len < 14) return bad_len("13 + name length, name not empty");
      const uint8_t nlen = p[12];
      if (nlen == 0 || len != 13u + nlen) return bad_len(std::to_string(13u + nlen) + " for a " + std::to_string(nlen) +
                                                         "-byte block name");
      m.offset = LoadBe64(p);
      m.length = LoadBe32(p + 8);
      m.block_name.assign(reinterpret_cast<const char*>(p + 13), nlen);
      last_block_ = m.block_name;
      have_block_ = true;
      in_.Consume(len);
      break;
    }
    case ReturnPathType::kRecvBitmap: {
      if (len < 2 || len != 1u + p[0]) return bad_len("1 + name length, name not empty");
      m.block_name.assign(reinterpret_cast<const char*>(p + 1), p[0]);
      in_.Consume(len);
      const uint64_t at = in_.offset();
      HLT_ASSIGN_OR_RETURN(uint64_t size, in_.Be64("bitmap size"));
      if (size > max_bitmap_bytes_ || size % 8 != 0) {
        return in_.CorruptAt(at, "RECV_BITMAP size " + std::to_string(size) + " (expected a multiple of 8 up to " +
                                     std::to_string(max_bitmap_bytes_) + ")");
      }
      HLT_RETURN_IF_ERROR(in_.Bytes(size, "bitmap", &m.bitmap));
      const uint64_t end_at = in_.offset();
      HLT_ASSIGN_OR_RETURN(uint64_t ending, in_.Be64("bitmap end marker"));
      if (ending != kRecvBitmapEnding) {
        return in_.CorruptAt(end_at, "bitmap end marker " + fmt::format("{:#x}", ending) + " (expected 0x123456789abcdef)");
      }
      return std::optional(std::move(m));
    }
    default:
      return in_.CorruptAt(m.stream_offset, "unknown message type " + std::to_string(type) + " (expected 1..6)");
  }
  if (m.length == 0) return in_.CorruptAt(m.stream_offset, "page request of length 0");
  return std::optional(std::move(m));
}

}  // namespace halite::qemu
