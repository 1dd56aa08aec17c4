#include "halite/qemu/qemu_stream_writer.h"

#include <fmt/format.h>

#include "halite/bytes.h"

namespace halite::qemu {
namespace {

// QEMU sends at most 12 ranges per discard command; staying within that keeps each command well under the
// be16 length limit whatever the block name.
constexpr size_t kMaxDiscardRanges = 12;

}  // namespace

MigrationStreamWriter::MigrationStreamWriter(SequentialSink* sink, const SavedVmState* state,
                                             MigrationStreamWriterOptions options)
    : sink_(sink), state_(state), options_(options) {
  sent_.resize(state_->ram_blocks.size());
  for (size_t i = 0; i < state_->ram_blocks.size(); ++i) {
    sent_[i].assign((state_->ram_blocks[i].page_count() + 63) / 64, 0);
    total_pages_ += state_->ram_blocks[i].page_count();
  }
}

Status MigrationStreamWriter::Order(bool ok, const char* what) const {
  if (ok) return Status::Ok();
  return Status::Internal(std::string("migration stream writer: ") + what + " out of order (phase " +
                          std::to_string(static_cast<int>(phase_)) + (in_section_ ? ", inside a RAM section" : "") + ")");
}

Status MigrationStreamWriter::WriteHeader() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kNew, "header"));
  std::string b;
  PutBe32(&b, kStreamMagic);
  PutBe32(&b, kStreamVersion);
  phase_ = Phase::kHeader;
  return Put(b);
}

Status MigrationStreamWriter::WriteConfiguration() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kHeader, "configuration"));
  if (state_->configuration.empty() || static_cast<uint8_t>(state_->configuration[0]) != kTagConfiguration) {
    return Status::InvalidArgument("saved state has no configuration record (expected tag 0x07)");
  }
  phase_ = Phase::kConfiguration;
  return Put(state_->configuration);
}

Status MigrationStreamWriter::WriteCommand(Command cmd, std::string_view payload) {
  HLT_RETURN_IF_ERROR(Order(phase_ >= Phase::kConfiguration && phase_ < Phase::kEof && !in_section_, "command"));
  if (payload.size() > 0xffff) return Status::Internal("command payload over 65535 bytes");
  std::string b;
  PutU8(&b, kTagCommand);
  PutBe16(&b, static_cast<uint16_t>(cmd));
  PutBe16(&b, static_cast<uint16_t>(payload.size()));
  b.append(payload);
  return Put(b);
}

Status MigrationStreamWriter::BeginResumedStream() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kNew, "resumed stream"));
  advised_ = true;
  phase_ = Phase::kPackaged;
  return Status::Ok();
}

Status MigrationStreamWriter::WriteRecvBitmapRequest(uint32_t block) {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kPackaged && advised_ && !in_section_, "RECV_BITMAP"));
  if (block >= state_->ram_blocks.size()) return Status::InvalidArgument("RECV_BITMAP: no block " + std::to_string(block));
  const std::string& name = state_->ram_blocks[block].name;
  if (name.empty() || name.size() > 255) return Status::InvalidArgument("RECV_BITMAP: block name length " + std::to_string(name.size()));
  std::string payload(1, static_cast<char>(name.size()));
  payload += name;
  return WriteCommand(Command::kRecvBitmap, payload);
}

Status MigrationStreamWriter::WritePostcopyResume() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kPackaged && advised_ && !in_section_, "POSTCOPY_RESUME"));
  return WriteCommand(Command::kPostcopyResume, {});
}

Status MigrationStreamWriter::WriteOpenReturnPath() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kConfiguration, "OPEN_RETURN_PATH"));
  return WriteCommand(Command::kOpenReturnPath, {});
}

Status MigrationStreamWriter::WritePing(uint32_t value) {
  std::string p;
  PutBe32(&p, value);
  return WriteCommand(Command::kPing, p);
}

Status MigrationStreamWriter::WritePostcopyAdvise(uint64_t pagesize_summary, uint64_t target_page_size) {
  // The destination must learn about postcopy before the block list: it then reads page sizes in it.
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kConfiguration && !advised_, "POSTCOPY_ADVISE"));
  std::string p;
  PutBe64(&p, pagesize_summary);
  PutBe64(&p, target_page_size);
  advised_ = true;
  return WriteCommand(Command::kPostcopyAdvise, p);
}

Status MigrationStreamWriter::WriteRamStart() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kConfiguration, "RAM START"));
  if (state_->ram_blocks.empty()) return Status::InvalidArgument("saved state has no RAMBlocks");
  std::string b;
  PutU8(&b, kTagSectionStart);
  PutBe32(&b, state_->ram_section_id);
  PutU8(&b, 3);
  b += kRamSectionName;
  PutBe32(&b, state_->ram_instance_id);
  PutBe32(&b, state_->ram_version_id);
  uint64_t total = 0;
  for (const auto& blk : state_->ram_blocks) total += blk.used_length;
  PutBe64(&b, total | kRamFlagMemSize);
  for (const auto& blk : state_->ram_blocks) {
    if (blk.name.empty() || blk.name.size() > 255) return Status::InvalidArgument("RAMBlock name length out of range");
    PutU8(&b, static_cast<uint8_t>(blk.name.size()));
    b += blk.name;
    PutBe64(&b, blk.used_length);
    if (advised_ && options_.page_sizes_in_block_list && blk.page_size != 0 &&
        blk.page_size != options_.host_page_size) {
      PutBe64(&b, blk.page_size);
    }
  }
  PutBe64(&b, kRamFlagEos);
  PutU8(&b, kTagSectionFooter);
  PutBe32(&b, state_->ram_section_id);
  phase_ = Phase::kRamStarted;
  return Put(b);
}

Status MigrationStreamWriter::WritePostcopyRamDiscard(uint32_t block,
                                                      std::span<const std::pair<uint64_t, uint64_t>> ranges) {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kRamStarted && advised_ && !in_section_, "POSTCOPY_RAM_DISCARD"));
  if (pages_sent_ != 0) return Status::Internal("POSTCOPY_RAM_DISCARD after pages were sent would wipe them");
  if (block >= state_->ram_blocks.size()) return Status::Internal("discard: block index out of range");
  const RamBlockInfo& blk = state_->ram_blocks[block];
  for (size_t first = 0; first < ranges.size(); first += kMaxDiscardRanges) {
    std::string p;
    PutU8(&p, kDiscardVersion);
    PutU8(&p, static_cast<uint8_t>(blk.name.size()));
    p += blk.name;
    PutU8(&p, 0);  // the destination checks for this NUL after the name
    for (size_t i = first; i < ranges.size() && i < first + kMaxDiscardRanges; ++i) {
      const auto [start, len] = ranges[i];
      if (start % kTargetPageSize || len % kTargetPageSize || start + len > blk.used_length || start + len < start) {
        return Status::Internal("discard range " + fmt::format("{:#x}", start) + "+" + fmt::format("{:#x}", len) + " outside block " + blk.name);
      }
      PutBe64(&p, start);
      PutBe64(&p, len);
    }
    HLT_RETURN_IF_ERROR(WriteCommand(Command::kPostcopyRamDiscard, p));
  }
  discarded_ = true;
  return Status::Ok();
}

Status MigrationStreamWriter::WriteDiscardAll() {
  for (uint32_t i = 0; i < state_->ram_blocks.size(); ++i) {
    const std::pair<uint64_t, uint64_t> all{0, state_->ram_blocks[i].used_length};
    HLT_RETURN_IF_ERROR(WritePostcopyRamDiscard(i, std::span(&all, 1)));
  }
  return Status::Ok();
}

Status MigrationStreamWriter::WritePackaged(bool with_ping, uint32_t ping_value, std::optional<uint32_t> listen_ping) {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kRamStarted && advised_ && !in_section_, "PACKAGED"));
  if (!discarded_) {
    // Without a discard QEMU 7.2's destination state machine stays in ADVISE and its listen thread deadlocks.
    return Status::Internal("PACKAGED before any POSTCOPY_RAM_DISCARD (QEMU 7.2 needs one)");
  }
  std::string pkg;
  auto cmd = [&pkg](Command c, std::string_view payload) {
    PutU8(&pkg, kTagCommand);
    PutBe16(&pkg, static_cast<uint16_t>(c));
    PutBe16(&pkg, static_cast<uint16_t>(payload.size()));
    pkg.append(payload);
  };
  cmd(Command::kPostcopyListen, {});
  if (listen_ping) {
    std::string v;
    PutBe32(&v, *listen_ping);
    cmd(Command::kPing, v);
  }
  pkg += state_->device_state;
  if (with_ping) {
    std::string v;
    PutBe32(&v, ping_value);
    cmd(Command::kPing, v);
  }
  cmd(Command::kPostcopyRun, {});
  if (pkg.size() > kMaxPackagedSize) {
    return Status::InvalidArgument("device state of " + std::to_string(state_->device_state.size()) +
                                   " bytes does not fit QEMU's 16 MiB postcopy package: use an eager restore");
  }
  // The package length travels as the command's payload; the package bytes follow, outside the length field.
  std::string len;
  PutBe32(&len, static_cast<uint32_t>(pkg.size()));
  HLT_RETURN_IF_ERROR(WriteCommand(Command::kPackaged, len));
  phase_ = Phase::kPackaged;
  return Put(pkg);
}

Status MigrationStreamWriter::BeginRamSection(uint8_t tag) {
  HLT_RETURN_IF_ERROR(Order((phase_ == Phase::kRamStarted || phase_ == Phase::kPackaged) && !in_section_,
                            "RAM section"));
  std::string b;
  PutU8(&b, tag);
  PutBe32(&b, state_->ram_section_id);
  in_section_ = true;
  end_section_ = tag == kTagSectionEnd;
  // Name the block in the section's first record rather than rely on CONTINUE state across sections.
  last_block_ = -1;
  section_pages_ = 0;
  return Put(b);
}

Status MigrationStreamWriter::BeginRamPart() { return BeginRamSection(kTagSectionPart); }
Status MigrationStreamWriter::BeginRamEnd() { return BeginRamSection(kTagSectionEnd); }

Status MigrationStreamWriter::EndRamSection() {
  HLT_RETURN_IF_ERROR(Order(in_section_, "end of RAM section"));
  std::string b;
  PutBe64(&b, kRamFlagEos);
  PutU8(&b, kTagSectionFooter);
  PutBe32(&b, state_->ram_section_id);
  in_section_ = false;
  if (end_section_) phase_ = Phase::kRamEnded;
  return Put(b);
}

Status MigrationStreamWriter::WriteRamEnd() {
  HLT_RETURN_IF_ERROR(BeginRamEnd());
  return EndRamSection();
}

bool MigrationStreamWriter::IsSent(PageId page) const {
  if (page.block >= sent_.size() || page.page >= state_->ram_blocks[page.block].page_count()) return false;
  return (sent_[page.block][page.page / 64] >> (page.page % 64)) & 1;
}

Status MigrationStreamWriter::PageHeader(PageId page, uint64_t flag, std::string* rec) {
  HLT_RETURN_IF_ERROR(Order(in_section_, "page"));
  if (page.block >= sent_.size() || page.page >= state_->ram_blocks[page.block].page_count()) {
    return Status::Internal("page " + std::to_string(page.page) + " of block " + std::to_string(page.block) +
                            " is outside the saved RAMBlocks");
  }
  if (IsSent(page)) {
    return Status::Internal("page " + fmt::format("{:#x}", page.page * kTargetPageSize) + " of " + state_->ram_blocks[page.block].name +
                            " sent twice (QEMU refuses a page already placed)");
  }
  sent_[page.block][page.page / 64] |= uint64_t{1} << (page.page % 64);
  ++pages_sent_;
  ++section_pages_;
  const bool cont = last_block_ == static_cast<int>(page.block);
  PutBe64(rec, page.page * kTargetPageSize | flag | (cont ? kRamFlagContinue : 0));
  if (!cont) {
    const std::string& name = state_->ram_blocks[page.block].name;
    PutU8(rec, static_cast<uint8_t>(name.size()));
    *rec += name;
    last_block_ = static_cast<int>(page.block);
  }
  return Status::Ok();
}

Status MigrationStreamWriter::WritePage(PageId page, const uint8_t* data) {
  scratch_.clear();
  HLT_RETURN_IF_ERROR(PageHeader(page, kRamFlagPage, &scratch_));
  HLT_RETURN_IF_ERROR(Put(scratch_));
  return sink_->Write(data, kTargetPageSize);
}

Status MigrationStreamWriter::WriteZeroPage(PageId page, uint8_t fill) {
  scratch_.clear();
  HLT_RETURN_IF_ERROR(PageHeader(page, kRamFlagZero, &scratch_));
  PutU8(&scratch_, fill);
  return Put(scratch_);
}

Status MigrationStreamWriter::WriteDeviceState() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kRamEnded && !advised_, "device state"));
  return Put(state_->device_state);
}

Status MigrationStreamWriter::WriteEof() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kRamEnded, "EOF"));
  phase_ = Phase::kEof;
  std::string b(1, static_cast<char>(kTagEof));
  return Put(b);
}

Status MigrationStreamWriter::WriteVmdesc() {
  HLT_RETURN_IF_ERROR(Order(phase_ == Phase::kEof, "VMDESC"));
  phase_ = Phase::kVmdesc;
  if (state_->vmdesc.empty()) return Status::Ok();
  std::string b;
  PutU8(&b, kTagVmdesc);
  PutBe32(&b, static_cast<uint32_t>(state_->vmdesc.size()));
  b += state_->vmdesc;
  return Put(b);
}

}  // namespace halite::qemu
