#include "halite/qemu/qemu_stream_reader.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "halite/bytes.h"
#include "halite/qemu/qmp_json.h"

namespace halite::qemu {
namespace {

constexpr uint64_t kKnownRamFlags = kRamFlagZero | kRamFlagMemSize | kRamFlagPage | kRamFlagEos | kRamFlagContinue;
constexpr size_t kMaxMachineName = 1024;
constexpr uint32_t kMaxConfigCapabilities = 256;

std::string UnsupportedFlagNames(uint64_t flags) {
  std::string s;
  auto add = [&](uint64_t bit, const char* what) {
    if (flags & bit) {
      if (!s.empty()) s += ", ";
      s += what;
      flags &= ~bit;
    }
  };
  add(kRamFlagFull, "FULL (obsolete pre-2.0 format)");
  add(kRamFlagXbzrle, "XBZRLE (turn off the xbzrle capability)");
  add(kRamFlagHook, "HOOK (RDMA transport)");
  add(kRamFlagCompressPage, "COMPRESS_PAGE (turn off the compress capability)");
  add(kRamFlagMultifdFlush, "MULTIFD_FLUSH (turn off the multifd capability)");
  if (flags) {
    if (!s.empty()) s += ", ";
    s += "unknown bits " + fmt::format("{:#x}", flags);
  }
  return s;
}

// First clear bit at or after `from` among the first n bits; n when none.
uint64_t FindNextZero(const std::vector<uint64_t>& bits, uint64_t from, uint64_t n) {
  while (from < n) {
    const uint64_t word = bits[from / 64] | ((uint64_t{1} << (from % 64)) - 1);  // ignore bits below `from`
    if (word != ~uint64_t{0}) {
      const uint64_t hit = (from & ~uint64_t{63}) + static_cast<uint64_t>(std::countr_one(word));
      return hit < n ? hit : n;
    }
    from = (from & ~uint64_t{63}) + 64;
  }
  return n;
}

}  // namespace

MigrationStreamReader::MigrationStreamReader(SequentialSource* source, MigrationStreamHandler* handler,
                                             MigrationStreamReaderOptions options)
    : in_(source, options.stream_name, 1 << 20), handler_(handler), options_(std::move(options)) {}

Status MigrationStreamReader::Run() {
  HLT_RETURN_IF_ERROR(ParseHeader());
  bool configuration_seen = false;
  for (;;) {
    HLT_ASSIGN_OR_RETURN(bool at_end, in_.AtEnd());
    if (at_end) return in_.Corrupt("stream ended without an EOF record (0x00)");
    const uint64_t tag_offset = in_.offset();
    HLT_ASSIGN_OR_RETURN(uint8_t tag, in_.U8("record tag"));
    switch (tag) {
      case kTagConfiguration:
        if (configuration_seen || ram_started_) return in_.CorruptAt(tag_offset, "unexpected second configuration");
        configuration_seen = true;
        HLT_RETURN_IF_ERROR(ParseConfiguration());
        break;
      case kTagCommand:
        HLT_RETURN_IF_ERROR(ParseCommand());
        break;
      case kTagSectionStart: {
        uint32_t id, instance, version;
        std::string name;
        HLT_RETURN_IF_ERROR(ParseSectionHeader(tag, &id, &name, &instance, &version));
        if (name != kRamSectionName) {
          return Status::Unsupported(options_.stream_name + ": offset " + fmt::format("{:#x}", tag_offset) + ": iterative section '" +
                                     name + "' (only RAM is supported: turn off block migration and dirty-bitmap "
                                     "migration)");
        }
        if (ram_started_) return in_.CorruptAt(tag_offset, "second RAM section START");
        if (version != kRamSectionVersion) {
          return Status::Unsupported(options_.stream_name + ": offset " + fmt::format("{:#x}", tag_offset) + ": RAM section version " +
                                     std::to_string(version) + " (expected 4)");
        }
        ram_started_ = true;
        state_.ram_section_id = id;
        state_.ram_instance_id = instance;
        state_.ram_version_id = version;
        HLT_RETURN_IF_ERROR(ParseRamBody(tag, id));
        break;
      }
      case kTagSectionPart:
      case kTagSectionEnd: {
        HLT_ASSIGN_OR_RETURN(uint32_t id, in_.Be32("section id"));
        if (!ram_started_ || id != state_.ram_section_id) {
          return in_.CorruptAt(tag_offset, std::string(tag == kTagSectionPart ? "PART" : "END") + " section id " +
                                               std::to_string(id) + " (expected the RAM section's id " +
                                               (ram_started_ ? std::to_string(state_.ram_section_id) : "none yet") + ")");
        }
        if (stats_.ram_end_seen) return in_.CorruptAt(tag_offset, "RAM section continues after its END");
        HLT_RETURN_IF_ERROR(ParseRamBody(tag, id));
        if (tag == kTagSectionEnd) stats_.ram_end_seen = true;
        break;
      }
      case kTagSectionFull:
      case kTagEof:
        if (!ram_started_) {
          return in_.CorruptAt(tag_offset, tag == kTagEof ? "EOF before any RAM section"
                                                          : "device section before the RAM section START");
        }
        if (state_.configuration.empty()) return in_.CorruptAt(tag_offset, "no configuration record before the devices");
        HLT_RETURN_IF_ERROR(CaptureTail(tag));
        stats_.bytes = in_.offset();
        return Status::Ok();
      default:
        return in_.CorruptAt(tag_offset, "unknown record tag " + fmt::format("{:#x}", tag) +
                                             " (expected configuration 0x07, command 0x08, section 0x01-0x04 or EOF 0x00)");
    }
  }
}

Status MigrationStreamReader::ParseHeader() {
  HLT_ASSIGN_OR_RETURN(uint32_t magic, in_.Be32("magic"));
  if (magic != kStreamMagic) return in_.CorruptAt(0, "magic " + fmt::format("{:#x}", magic) + " (expected 0x5145564d \"QEVM\")");
  HLT_ASSIGN_OR_RETURN(uint32_t version, in_.Be32("version"));
  if (version != kStreamVersion) {
    return Status::Unsupported(options_.stream_name + ": offset 0x4: stream version " + std::to_string(version) +
                               " (expected 3)");
  }
  state_.stream_version = version;
  return Status::Ok();
}

Status MigrationStreamReader::ParseConfiguration() {
  std::string& raw = state_.configuration;
  raw.push_back(static_cast<char>(kTagConfiguration));
  const uint64_t len_offset = in_.offset();
  HLT_ASSIGN_OR_RETURN(uint32_t len, in_.Be32("configuration name length"));
  PutBe32(&raw, len);
  if (len == 0 || len > kMaxMachineName) {
    return in_.CorruptAt(len_offset, "machine type name length " + std::to_string(len) + " (expected 1..1024)");
  }
  std::string name;
  HLT_RETURN_IF_ERROR(in_.Bytes(len, "machine type name", &name));
  raw += name;
  state_.machine_type = name;
  for (;;) {
    HLT_ASSIGN_OR_RETURN(const uint8_t* peek, in_.Need(1, "the record after the configuration"));
    if (peek[0] != kTagSubsection) return handler_->OnConfiguration(state_.machine_type);
    const uint64_t sub_offset = in_.offset();
    in_.Consume(1);
    raw.push_back(static_cast<char>(kTagSubsection));
    HLT_ASSIGN_OR_RETURN(uint8_t nlen, in_.U8("subsection name length"));
    PutU8(&raw, nlen);
    std::string sub;
    HLT_RETURN_IF_ERROR(in_.Bytes(nlen, "subsection name", &sub));
    raw += sub;
    HLT_ASSIGN_OR_RETURN(uint32_t sub_version, in_.Be32("subsection version"));
    PutBe32(&raw, sub_version);
    if (sub == "configuration/target-page-bits") {
      HLT_ASSIGN_OR_RETURN(uint32_t bits, in_.Be32("target page bits"));
      PutBe32(&raw, bits);
      if (bits != 12) {
        return Status::Unsupported(options_.stream_name + ": offset " + fmt::format("{:#x}", sub_offset) + ": target page bits " +
                                   std::to_string(bits) + " (this reader handles 4 KiB target pages)");
      }
    } else if (sub == "configuration/capabilities") {
      HLT_ASSIGN_OR_RETURN(uint32_t count, in_.Be32("capability count"));
      PutBe32(&raw, count);
      if (count > kMaxConfigCapabilities) {
        return in_.CorruptAt(sub_offset, "configuration lists " + std::to_string(count) + " capabilities (limit 256)");
      }
      for (uint32_t i = 0; i < count; ++i) {
        HLT_ASSIGN_OR_RETURN(uint8_t clen, in_.U8("capability name length"));
        PutU8(&raw, clen);
        std::string cap;
        HLT_RETURN_IF_ERROR(in_.Bytes(clen, "capability name", &cap));
        raw += cap;
        if (cap == "x-ignore-shared") ignore_shared_ = true;
      }
    } else {
      return Status::Unsupported(options_.stream_name + ": offset " + fmt::format("{:#x}", sub_offset) + ": configuration subsection '" +
                                 sub + "'");
    }
  }
}

Status MigrationStreamReader::ParseCommand() {
  const uint64_t at = in_.offset() - 1;
  HLT_ASSIGN_OR_RETURN(uint16_t cmd, in_.Be16("command id"));
  HLT_ASSIGN_OR_RETURN(uint16_t len, in_.Be16("command length"));
  std::string payload;
  switch (static_cast<Command>(cmd)) {
    case Command::kOpenReturnPath:
    case Command::kPing:
      return in_.Bytes(len, "command payload", &payload);
    case Command::kPostcopyAdvise:
      if (len != 0 && len != 16) {
        return in_.CorruptAt(at, "POSTCOPY_ADVISE length " + std::to_string(len) + " (expected 0 or 16)");
      }
      HLT_RETURN_IF_ERROR(in_.Bytes(len, "POSTCOPY_ADVISE payload", &payload));
      if (ram_started_) return in_.CorruptAt(at, "POSTCOPY_ADVISE after the RAM section START");
      // Only an advise with postcopy-ram (length 16) changes the MEM_SIZE list: page sizes appear in it.
      stats_.postcopy_advised = len == 16;
      return Status::Ok();
    default:
      if (cmd >= 1 && cmd <= 10) {
        return Status::Unsupported(options_.stream_name + ": offset " + fmt::format("{:#x}", at) + ": command " + CommandName(cmd) +
                                   " in a saved stream (the source switched to postcopy or COLO: save with precopy)");
      }
      return in_.CorruptAt(at, "unknown command " + std::to_string(cmd) + " (expected 1..10)");
  }
}

Status MigrationStreamReader::ParseSectionHeader(uint8_t tag, uint32_t* id, std::string* name, uint32_t* instance,
                                                 uint32_t* version) {
  HLT_ASSIGN_OR_RETURN(*id, in_.Be32("section id"));
  HLT_ASSIGN_OR_RETURN(uint8_t nlen, in_.U8("section name length"));
  HLT_RETURN_IF_ERROR(in_.Bytes(nlen, "section name", name));
  HLT_ASSIGN_OR_RETURN(*instance, in_.Be32("instance id"));
  HLT_ASSIGN_OR_RETURN(*version, in_.Be32("version id"));
  return Status::Ok();
}

Status MigrationStreamReader::ParseFooter(uint32_t section_id) {
  const uint64_t at = in_.offset();
  HLT_ASSIGN_OR_RETURN(uint8_t f, in_.U8("section footer"));
  if (f != kTagSectionFooter) {
    return in_.CorruptAt(at, "section " + std::to_string(section_id) + " footer " + fmt::format("{:#x}", f) + " (expected 0x7e)");
  }
  HLT_ASSIGN_OR_RETURN(uint32_t id, in_.Be32("footer section id"));
  if (id != section_id) {
    return in_.CorruptAt(at, "section " + std::to_string(section_id) + " footer names section " + std::to_string(id));
  }
  return Status::Ok();
}

Status MigrationStreamReader::ParseBlockList(uint64_t total_bytes) {
  // Everything sized by the list (a bit a page in seen_, the arrival order) is bounded by the total, so the
  // total is checked first; each block must then fit in what is left of it.
  const uint64_t limit = std::min(options_.max_ram_bytes, kMaxStreamRamBytes);
  if (total_bytes > limit) {
    return in_.CorruptAt(in_.offset() - 8, "MEM_SIZE announces " + fmt::format("{:#x}", total_bytes) +
                                               " bytes of RAM, over the limit of " + fmt::format("{:#x}", limit) +
                                               " (the guest's RAM as its QEMU reported it, at most 8 TiB)");
  }
  uint64_t remaining = total_bytes;
  while (remaining > 0) {
    const uint64_t at = in_.offset();
    if (state_.ram_blocks.size() == kMaxStreamRamBlocks) {
      return in_.CorruptAt(at, "more than " + std::to_string(kMaxStreamRamBlocks) + " RAMBlocks (" +
                                   fmt::format("{:#x}", remaining) + " of the announced bytes still unlisted)");
    }
    HLT_ASSIGN_OR_RETURN(uint8_t nlen, in_.U8("RAMBlock name length"));
    RamBlockInfo b;
    HLT_RETURN_IF_ERROR(in_.Bytes(nlen, "RAMBlock name", &b.name));
    HLT_ASSIGN_OR_RETURN(b.used_length, in_.Be64("RAMBlock used length"));
    if (nlen == 0) return in_.CorruptAt(at, "RAMBlock with an empty name");
    if (state_.FindBlock(b.name) >= 0) return in_.CorruptAt(at, "RAMBlock " + b.name + " listed twice");
    if (b.used_length == 0 || b.used_length % kTargetPageSize != 0) {
      return in_.CorruptAt(at, "RAMBlock " + b.name + " used length " + fmt::format("{:#x}", b.used_length) +
                                   " (expected a non-zero multiple of 4096)");
    }
    if (b.used_length > remaining) {
      return in_.CorruptAt(at, "RAMBlock " + b.name + " (" + fmt::format("{:#x}", b.used_length) + " bytes) overruns the announced total " +
                                   fmt::format("{:#x}", total_bytes) + " by " + fmt::format("{:#x}", b.used_length - remaining));
    }
    remaining -= b.used_length;
    if (auto it = options_.block_page_sizes.find(b.name); it != options_.block_page_sizes.end()) b.page_size = it->second;
    // A postcopy-advised source adds the page size of blocks not backed by its host page size.
    if (stats_.postcopy_advised && b.page_size != 0 && b.page_size != options_.source_host_page_size) {
      HLT_ASSIGN_OR_RETURN(uint64_t ps, in_.Be64("RAMBlock page size"));
      if (ps != b.page_size) {
        return in_.CorruptAt(at, "RAMBlock " + b.name + " page size " + fmt::format("{:#x}", ps) + " (expected " + fmt::format("{:#x}", b.page_size) + ")");
      }
    }
    if (ignore_shared_) {
      HLT_ASSIGN_OR_RETURN(uint64_t addr, in_.Be64("RAMBlock address (x-ignore-shared)"));
      (void)addr;
    }
    state_.ram_blocks.push_back(std::move(b));
  }
  announced_pages_ = total_bytes / kTargetPageSize;
  seen_.resize(state_.ram_blocks.size());
  for (size_t i = 0; i < state_.ram_blocks.size(); ++i) seen_[i].assign((state_.ram_blocks[i].page_count() + 63) / 64, 0);
  return handler_->OnRamBlocks(state_.ram_blocks);
}

Status MigrationStreamReader::ParseRamBody(uint8_t tag, uint32_t section_id) {
  ++stats_.ram_sections;
  bool first = true;
  for (;;) {
    const uint64_t at = in_.offset();
    HLT_ASSIGN_OR_RETURN(uint64_t word, in_.Be64("RAM record header"));
    const uint64_t flags = word & ~kTargetPageMask;
    const uint64_t addr = word & kTargetPageMask;
    if (flags & ~kKnownRamFlags) {
      return Status::Unsupported(options_.stream_name + ": offset " + fmt::format("{:#x}", at) + ": RAM record flags " + fmt::format("{:#x}", flags) +
                                 ": " + UnsupportedFlagNames(flags & ~kKnownRamFlags));
    }
    const uint64_t kind = flags & ~kRamFlagContinue;
    if (kind == kRamFlagEos) return ParseFooter(section_id);
    if (kind == kRamFlagMemSize) {
      if (tag != kTagSectionStart || !first || !state_.ram_blocks.empty()) {
        return in_.CorruptAt(at, "MEM_SIZE record outside the start of the RAM section START");
      }
      if (flags & kRamFlagContinue) return in_.CorruptAt(at, "MEM_SIZE record with CONTINUE");
      HLT_RETURN_IF_ERROR(ParseBlockList(addr));
      first = false;
      continue;
    }
    if (kind != kRamFlagPage && kind != kRamFlagZero) {
      return in_.CorruptAt(at, "RAM record flags " + fmt::format("{:#x}", flags) +
                                   " (expected exactly one of ZERO 0x2, MEM_SIZE 0x4, PAGE 0x8, EOS 0x10, plus CONTINUE 0x20)");
    }
    first = false;
    if (state_.ram_blocks.empty()) return in_.CorruptAt(at, "page record before the MEM_SIZE block list");
    int block;
    if (flags & kRamFlagContinue) {
      if (last_block_ < 0) return in_.CorruptAt(at, "CONTINUE record with no previous block");
      block = last_block_;
    } else {
      HLT_ASSIGN_OR_RETURN(uint8_t nlen, in_.U8("RAMBlock name length"));
      std::string name;
      HLT_RETURN_IF_ERROR(in_.Bytes(nlen, "RAMBlock name", &name));
      block = state_.FindBlock(name);
      if (block < 0) return in_.CorruptAt(at, "page record names unknown RAMBlock '" + name + "'");
      last_block_ = block;
    }
    const RamBlockInfo& b = state_.ram_blocks[block];
    if (addr >= b.used_length) {
      return in_.CorruptAt(at, "page offset " + fmt::format("{:#x}", addr) + " beyond RAMBlock " + b.name + "'s used length " +
                                   fmt::format("{:#x}", b.used_length));
    }
    if (kind == kRamFlagZero) {
      HLT_ASSIGN_OR_RETURN(uint8_t fill, in_.U8("zero page fill byte"));
      HLT_RETURN_IF_ERROR(DeliverPage(block, addr, true, fill, nullptr));
    } else {
      HLT_ASSIGN_OR_RETURN(const uint8_t* data, in_.Need(kTargetPageSize, "page data"));
      HLT_RETURN_IF_ERROR(DeliverPage(block, addr, false, 0, data));
      in_.Consume(kTargetPageSize);
    }
  }
}

bool MigrationStreamReader::Seen(const PageId& p) const { return (seen_[p.block][p.page / 64] >> (p.page % 64)) & 1; }

bool MigrationStreamReader::NextUnseenAfter(const PageId* after, PageId* out) const {
  const size_t nblocks = state_.ram_blocks.size();
  const uint32_t start_block = after ? after->block : 0;
  uint64_t from = after ? after->page + 1 : 0;
  // One lap over the blocks, starting in the current block and wrapping around into it again.
  for (size_t step = 0; step <= nblocks; ++step) {
    const uint32_t b = static_cast<uint32_t>((start_block + step) % nblocks);
    const uint64_t n = state_.ram_blocks[b].page_count();
    const uint64_t hit = FindNextZero(seen_[b], from, n);
    if (hit < n) {
      out->block = b;
      out->page = hit;
      return true;
    }
    from = 0;
  }
  return false;
}

Status MigrationStreamReader::DeliverPage(uint32_t block, uint64_t offset, bool zero, uint8_t fill,
                                          const uint8_t* data) {
  PageRecord r;
  r.id = PageId{block, offset / kTargetPageSize};
  r.block = &state_.ram_blocks[block];
  r.offset = offset;
  r.is_zero = zero;
  r.fill = fill;
  r.data = data;
  r.sequence = stats_.page_records;
  r.duplicate = Seen(r.id);
  r.out_of_scan_order = false;
  if (r.duplicate) {
    ++stats_.duplicate_pages;
  } else {
    PageId expected;
    if (NextUnseenAfter(have_last_ ? &last_ : nullptr, &expected) && !(expected == r.id)) {
      r.out_of_scan_order = true;
      out_of_order_.push_back(r.id);
      ++stats_.scan_jumps;
    }
    seen_[block][r.id.page / 64] |= uint64_t{1} << (r.id.page % 64);
    ++distinct_seen_;
  }
  have_last_ = true;
  last_ = r.id;
  ++stats_.page_records;
  if (zero) {
    ++stats_.zero_pages;
  } else {
    ++stats_.data_pages;
  }
  if (options_.record_arrival_order) {
    if (arrival_.size() < 2 * announced_pages_) {
      arrival_.push_back(r.id);
    } else {
      stats_.arrival_order_truncated = true;
    }
  }
  return handler_->OnPage(r);
}

std::vector<PageId> MigrationStreamReader::MissingPages(size_t limit) const {
  std::vector<PageId> out;
  for (uint32_t b = 0; b < seen_.size() && out.size() < limit; ++b) {
    const uint64_t n = state_.ram_blocks[b].page_count();
    for (uint64_t p = FindNextZero(seen_[b], 0, n); p < n && out.size() < limit; p = FindNextZero(seen_[b], p + 1, n)) {
      out.push_back(PageId{b, p});
    }
  }
  return out;
}

Status MigrationStreamReader::CaptureTail(uint8_t first_tag) {
  const uint64_t base = in_.offset() - 1;
  std::string tail(1, static_cast<char>(first_tag));
  HLT_RETURN_IF_ERROR(in_.ReadToEnd(&tail, options_.max_device_state, "device state and VMDESC"));
  return SplitDeviceStateTail(tail, base, options_.stream_name, options_.require_vmdesc, &state_.device_state,
                              &state_.vmdesc);
}

Status SplitDeviceStateTail(std::string_view tail, uint64_t base, const std::string& stream_name,
                            bool require_vmdesc, std::string* device_state, std::string* vmdesc) {
  // Device sections have no length, so the split is found from the end: EOF, then VMDESC whose be32 length
  // reaches exactly to the end and whose body is JSON. JSON cannot contain a 0x00 byte, so no position inside
  // the real VMDESC can pass; the first candidate that parses is the real one.
  const auto* p = reinterpret_cast<const uint8_t*>(tail.data());
  const size_t n = tail.size();
  for (size_t i = 0; i + 6 <= n; ++i) {
    if (p[i] != kTagEof || p[i + 1] != kTagVmdesc) continue;
    if (LoadBe32(p + i + 2) != n - i - 6) continue;
    const std::string_view json = tail.substr(i + 6);
    if (!ParseJson(json, "vmdesc").has_value()) continue;
    device_state->assign(tail.substr(0, i));
    vmdesc->assign(json);
    return Status::Ok();
  }
  if (require_vmdesc) {
    return Status::Corrupt(stream_name + ": offset " + fmt::format("{:#x}", base) + ": the " + std::to_string(n) +
                           " bytes after the RAM do not end with EOF (0x00) + VMDESC (0x06, be32 length, JSON): "
                           "stream truncated?");
  }
  if (n > 0 && p[n - 1] == kTagEof) {
    device_state->assign(tail.substr(0, n - 1));
    vmdesc->clear();
    return Status::Ok();
  }
  return Status::Corrupt(stream_name + ": offset " + fmt::format("{:#x}", base) + ": the " + std::to_string(n) +
                         " bytes after the RAM do not end with EOF (0x00), optionally followed by VMDESC (0x06, be32 "
                         "length, JSON)");
}

}  // namespace halite::qemu
