#include "halite/checkpoint_reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "codec/hashing.h"
#include "codec/mac.h"
#include "codec/zstd_codec.h"
#include "format/byte_order.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "format/integrity_checks.h"
#include "halite/format_constants.h"

namespace halite {

using format::kPageSize;

class HALITE_HIDDEN CheckpointReader::Impl {
 public:
  Impl(std::unique_ptr<RandomAccessFile> file, ReaderOptions options)
      : file_(std::move(file)), options_(std::move(options)) {}

  Status Open();
  // With a key, the payload's MAC; then its checksum.
  Status VerifyPayload(uint32_t block, std::span<const uint8_t> payload) const;
  // VerifyPayload; when that fails, reads the payload from storage once more (into `payload`) and verifies
  // again. *reread is set when the second read verified.
  Status VerifyOrReread(uint32_t block, std::span<uint8_t> payload, bool* reread) const;
  // Decompresses a verified payload into `out` (copies it when the block is stored raw).
  Status Decompress(uint32_t block, std::span<const uint8_t> payload, std::span<uint8_t> out) const;
  Status ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread) const;
  Status ReadBlocks(std::span<const uint32_t> blocks, std::span<const std::span<uint8_t>> outs,
                    std::span<Status> statuses) const;
  Result<std::vector<uint8_t>> ReadBlob(uint32_t index) const;

  PageLocation Locate(uint64_t g) const {
    uint32_t v = model_.page_map[g];
    if (v == format::kPageMapAbsent) return {PageKind::kAbsent, 0, 0};
    if (v == format::kPageMapZero) return {PageKind::kZero, 0, 0};
    uint64_t slot = v - format::kPageMapFirstSlot;
    uint32_t b = slot_block_[slot];
    return {PageKind::kStored, b, uint32_t(slot - model_.blocks[b].first_slot)};
  }

  std::string BlockWhere(uint32_t b) const {
    return file_->name() + ": block " + std::to_string(b) + " at offset " + fmt::format("{:#x}", model_.blocks[b].offset);
  }

  Status OpenChecked();

  std::unique_ptr<RandomAccessFile> file_;
  ReaderOptions options_;
  format::Header header_;
  format::Footer footer_;
  format::IndexModel model_;
  std::vector<uint32_t> slot_block_;           // slot -> block
  std::vector<uint64_t> member_start_;         // block -> first entry in members_ (CSR), size blocks+1
  std::vector<BlockMember> members_;
  std::shared_ptr<const codec::Dictionary> dictionary_;
  mutable std::atomic<uint64_t> blocks_reread_{0};
};

// With a key, any failure to open is a failure to authenticate.
Status CheckpointReader::Impl::Open() {
  if (options_.mac_key) {
    Status init = codec::InitMac();
    if (!init.ok()) return init.WithContext(file_->name());
  }
  Status s = OpenChecked();
  if (!s.ok() && options_.mac_key && s.code() == StatusCode::kCorrupt) {
    return Status::AuthFailed("cannot authenticate: " + s.message());
  }
  return s;
}

Status CheckpointReader::Impl::OpenChecked() {
  const std::string& name = file_->name();
  uint64_t size = file_->size();
  if (size < format::kHeaderSize + format::kFooterSize) {
    return Status::Corrupt(name + ": file is " + std::to_string(size) +
                           " bytes (a checkpoint has at least 128: empty, truncated or not a checkpoint)");
  }
  std::array<uint8_t, format::kFooterSize> fb;
  HLT_RETURN_IF_ERROR(file_->ReadAt(size - format::kFooterSize, fb));
  HLT_ASSIGN_OR_RETURN(footer_, format::DecodeFooter(fb, size, name));
  std::array<uint8_t, format::kHeaderSize> hb;
  HLT_RETURN_IF_ERROR(file_->ReadAt(0, hb));
  HLT_ASSIGN_OR_RETURN(header_, format::DecodeHeader(hb, name));
  HLT_RETURN_IF_ERROR(format::CheckFileIdsAgree(header_, footer_, name));
  // The index length was bounded by the file size in DecodeFooter, so this allocation is bounded too.
  std::vector<uint8_t> index(footer_.index_length);
  HLT_RETURN_IF_ERROR(file_->ReadAt(footer_.index_offset, index));
  uint64_t seed = format::FileSeed(header_.file_id);
  uint64_t computed = codec::Xxh3_64(index, seed);
  if (computed != footer_.index_checksum) {
    return Status::Corrupt(name + ": index at offset " + fmt::format("{:#x}", footer_.index_offset) + ": checksum mismatch (stored " +
                           fmt::format("{:#x}", footer_.index_checksum) + ", computed " + fmt::format("{:#x}", computed) + ")");
  }
  HLT_ASSIGN_OR_RETURN(model_, format::DecodeIndex(index, footer_.index_offset, name));
  HLT_RETURN_IF_ERROR(format::CheckMinorVersionCoversIndex(header_, model_, name));
  HLT_RETURN_IF_ERROR(format::CheckAuthenticatedFlag(header_, model_, name));
  if (options_.mac_key) HLT_RETURN_IF_ERROR(format::CheckIndexMac(*options_.mac_key, hb, index, model_, name));
  if (!model_.dictionary.empty()) {
    auto d = codec::Dictionary::Create(model_.dictionary, 3);
    if (!d) return d.error().WithContext(name + ": DICTIONARY section");
    dictionary_ = *d;
  }
  // Derived lookup tables: slot -> block, and block -> member pages (CSR, in slot order).
  uint64_t slots = model_.blocks.empty() ? 0 : model_.blocks.back().first_slot + model_.blocks.back().page_count;
  slot_block_.resize(slots);
  for (uint32_t b = 0; b < model_.blocks.size(); ++b) {
    const auto& bl = model_.blocks[b];
    std::fill_n(slot_block_.begin() + bl.first_slot, bl.page_count, b);
  }
  member_start_.assign(model_.blocks.size() + 1, 0);
  for (uint32_t v : model_.page_map) {
    if (v >= format::kPageMapFirstSlot) ++member_start_[slot_block_[v - format::kPageMapFirstSlot] + 1];
  }
  for (size_t b = 0; b < model_.blocks.size(); ++b) member_start_[b + 1] += member_start_[b];
  members_.resize(member_start_.back());
  std::vector<uint64_t> fill(member_start_.begin(), member_start_.end() - 1);
  for (uint64_t g = 0; g < model_.page_map.size(); ++g) {
    uint32_t v = model_.page_map[g];
    if (v < format::kPageMapFirstSlot) continue;
    uint64_t slot = v - format::kPageMapFirstSlot;
    uint32_t b = slot_block_[slot];
    members_[fill[b]++] = BlockMember{uint32_t(g), uint32_t(slot - model_.blocks[b].first_slot)};
  }
  for (size_t b = 0; b < model_.blocks.size(); ++b) {
    std::sort(members_.begin() + member_start_[b], members_.begin() + member_start_[b + 1],
              [](const BlockMember& x, const BlockMember& y) { return x.slot < y.slot || (x.slot == y.slot && x.page < y.page); });
  }
  return Status::Ok();
}

Status CheckpointReader::Impl::VerifyPayload(uint32_t block, std::span<const uint8_t> payload) const {
  const BlockInfo& b = model_.blocks[block];
  if (options_.mac_key) {
    HLT_RETURN_IF_ERROR(format::CheckPayloadMac(*options_.mac_key, format::kBlockMacTag, header_.file_id, block,
                                                payload, model_.mac.block_macs[block], BlockWhere(block)));
  }
  uint64_t seed = format::BlockSeed(format::FileSeed(header_.file_id), block);
  uint64_t computed = codec::Xxh3_64(payload, seed);
  if (computed != b.checksum) {
    return Status::Corrupt(BlockWhere(block) + ": checksum mismatch (stored " + fmt::format("{:#x}", b.checksum) + ", computed " +
                           fmt::format("{:#x}", computed) + ")");
  }
  return Status::Ok();
}

Status CheckpointReader::Impl::VerifyOrReread(uint32_t block, std::span<uint8_t> payload, bool* reread) const {
  Status first = VerifyPayload(block, payload);
  if (first.ok()) return first;
  // A bit flipped on the way (a bad cable, a network store, a flaky controller) is not corruption on storage:
  // read the payload once more before calling it corrupt. A second failure is what storage holds.
  Status again = file_->ReadAt(model_.blocks[block].offset, payload);
  if (!again.ok()) return again.WithContext("block " + std::to_string(block) + " (re-read after: " + first.message() + ")");
  Status second = VerifyPayload(block, payload);
  if (!second.ok()) return Status(second.code(), second.message() + ", also when read again");
  blocks_reread_.fetch_add(1, std::memory_order_relaxed);
  if (reread != nullptr) *reread = true;
  return second;
}

Status CheckpointReader::Impl::Decompress(uint32_t block, std::span<const uint8_t> payload,
                                          std::span<uint8_t> out) const {
  const BlockInfo& b = model_.blocks[block];
  if (!b.compressed()) {
    if (payload.data() != out.data()) std::memcpy(out.data(), payload.data(), out.size());
    return Status::Ok();
  }
  thread_local codec::Decompressor decompressor;
  Status s = decompressor.DecompressExact(payload, b.uses_dictionary() ? dictionary_.get() : nullptr, out);
  if (!s.ok()) return Status::Corrupt(BlockWhere(block) + ": " + s.message());
  return Status::Ok();
}

Status CheckpointReader::Impl::ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread) const {
  if (block >= model_.blocks.size()) return Status::InvalidArgument(file_->name() + ": no block " + std::to_string(block));
  const BlockInfo& b = model_.blocks[block];
  if (out.size() != b.raw_length()) return Status::InvalidArgument(BlockWhere(block) + ": output buffer has the wrong size");
  // A raw block is read straight into the caller's buffer, then verified.
  thread_local std::vector<uint8_t> payload_buffer;
  std::span<uint8_t> payload = out;
  if (b.compressed()) {
    payload_buffer.resize(b.stored_length);
    payload = payload_buffer;
  }
  Status s = file_->ReadAt(b.offset, payload);
  if (!s.ok()) return s.WithContext("block " + std::to_string(block));
  HLT_RETURN_IF_ERROR(VerifyOrReread(block, payload, reread));
  return Decompress(block, payload, out);
}

Status CheckpointReader::Impl::ReadBlocks(std::span<const uint32_t> blocks, std::span<const std::span<uint8_t>> outs,
                                          std::span<Status> statuses) const {
  if (blocks.size() != outs.size() || blocks.size() != statuses.size()) {
    return Status::InvalidArgument("ReadBlocks: blocks, outs and statuses differ in length");
  }
  std::vector<std::vector<uint8_t>> payloads(blocks.size());
  std::vector<ReadRequest> reqs(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i] >= model_.blocks.size()) return Status::InvalidArgument(file_->name() + ": no block " + std::to_string(blocks[i]));
    const BlockInfo& b = model_.blocks[blocks[i]];
    if (outs[i].size() != b.raw_length()) return Status::InvalidArgument(BlockWhere(blocks[i]) + ": output buffer has the wrong size");
    payloads[i].resize(b.stored_length);
    reqs[i].offset = b.offset;
    reqs[i].buffer = payloads[i];
  }
  (void)file_->ReadBatch(reqs);
  Status first;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!reqs[i].status.ok()) {
      statuses[i] = reqs[i].status.WithContext("block " + std::to_string(blocks[i]));
    } else {
      statuses[i] = VerifyOrReread(blocks[i], payloads[i], nullptr);
      if (statuses[i].ok()) statuses[i] = Decompress(blocks[i], payloads[i], outs[i]);
    }
    if (!statuses[i].ok() && first.ok()) first = statuses[i];
  }
  return first;
}

Result<std::vector<uint8_t>> CheckpointReader::Impl::ReadBlob(uint32_t index) const {
  if (index >= model_.blobs.size()) return Status::NotFound(file_->name() + ": no blob " + std::to_string(index));
  const BlobInfo& b = model_.blobs[index];
  std::string where = file_->name() + ": blob \"" + b.name + "\" at offset " + fmt::format("{:#x}", b.offset);
  std::vector<uint8_t> payload(b.stored_length);  // bounded by the file size (checked at open)
  HLT_RETURN_IF_ERROR(file_->ReadAt(b.offset, payload));
  if (options_.mac_key) {
    HLT_RETURN_IF_ERROR(format::CheckPayloadMac(*options_.mac_key, format::kBlobMacTag, header_.file_id, index,
                                                payload, model_.mac.blob_macs[index], where));
  }
  uint64_t computed = codec::Xxh3_64(payload, format::BlobSeed(format::FileSeed(header_.file_id), index));
  if (computed != b.checksum) {
    return Status::Corrupt(where + ": checksum mismatch (stored " + fmt::format("{:#x}", b.checksum) + ", computed " + fmt::format("{:#x}", computed) + ")");
  }
  if (!b.compressed()) return payload;
  // The checksum proves nothing against a hostile writer: check the frame agrees on the size before allocating.
  auto declared = codec::FrameContentSize(payload);
  if (!declared) return Status::Corrupt(where + ": " + declared.error().message());
  if (*declared != b.raw_length) {
    return Status::Corrupt(where + ": zstd frame declares " + std::to_string(*declared) + " bytes, raw_length is " +
                           std::to_string(b.raw_length));
  }
  std::vector<uint8_t> raw(b.raw_length);  // bounded by the 2^30 limit of section 6, and by the frame's claim
  codec::Decompressor d;
  Status s = d.DecompressExact(payload, nullptr, raw);
  if (!s.ok()) return Status::Corrupt(where + ": " + s.message());
  return raw;
}

// --- public shell ---

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::~CheckpointReader() = default;

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& path, ReaderOptions options) {
  HLT_ASSIGN_OR_RETURN(auto file, OpenLocalFile(path, options.file));
  return Open(std::move(file), std::move(options));
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(std::unique_ptr<RandomAccessFile> file,
                                                                 ReaderOptions options) {
  auto impl = std::make_unique<Impl>(std::move(file), std::move(options));
  HLT_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(std::move(impl)));
}

const std::string& CheckpointReader::name() const { return impl_->file_->name(); }
uint64_t CheckpointReader::file_size() const { return impl_->file_->size(); }
const FileId& CheckpointReader::file_id() const { return impl_->header_.file_id; }
uint16_t CheckpointReader::format_major() const { return impl_->header_.major; }
uint16_t CheckpointReader::format_minor() const { return impl_->header_.minor; }
uint64_t CheckpointReader::index_offset() const { return impl_->footer_.index_offset; }
uint64_t CheckpointReader::index_length() const { return impl_->footer_.index_length; }
const Metadata& CheckpointReader::metadata() const { return impl_->model_.metadata; }
const std::vector<Region>& CheckpointReader::regions() const { return impl_->model_.regions; }

Result<uint32_t> CheckpointReader::FindRegion(std::string_view name) const {
  const auto& rs = impl_->model_.regions;
  for (size_t i = 0; i < rs.size(); ++i) {
    if (rs[i].name == name) return uint32_t(i);
  }
  return Status::NotFound(impl_->file_->name() + ": no region \"" + std::string(name) + "\"");
}

uint64_t CheckpointReader::total_pages() const { return impl_->model_.page_map.size(); }
uint64_t CheckpointReader::GlobalPage(PageRef ref) const { return impl_->model_.regions[ref.region].first_page + ref.page; }
PageRef CheckpointReader::PageOf(uint64_t g) const {
  const auto& rs = impl_->model_.regions;
  auto it = std::upper_bound(rs.begin(), rs.end(), g, [](uint64_t v, const Region& r) { return v < r.first_page; });
  uint32_t r = uint32_t(it - rs.begin() - 1);
  return PageRef{r, g - rs[r].first_page};
}
const std::vector<BlockInfo>& CheckpointReader::blocks() const { return impl_->model_.blocks; }
const std::vector<BlobInfo>& CheckpointReader::blobs() const { return impl_->model_.blobs; }
const std::vector<uint32_t>& CheckpointReader::restore_order() const { return impl_->model_.restore_order; }
uint32_t CheckpointReader::working_set_blocks() const { return impl_->model_.working_set_blocks; }
size_t CheckpointReader::dictionary_size() const { return impl_->model_.dictionary.size(); }
bool CheckpointReader::authenticated() const { return impl_->model_.mac.present; }
PageLocation CheckpointReader::Locate(uint64_t g) const { return impl_->Locate(g); }

std::span<const BlockMember> CheckpointReader::BlockMembers(uint32_t block) const {
  const auto& s = impl_->member_start_;
  return std::span<const BlockMember>(impl_->members_.data() + s[block], s[block + 1] - s[block]);
}

Status CheckpointReader::ReadBlock(uint32_t block, std::span<uint8_t> out) const {
  return impl_->ReadBlock(block, out, nullptr);
}
Status CheckpointReader::ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread) const {
  return impl_->ReadBlock(block, out, reread);
}
uint64_t CheckpointReader::blocks_reread() const { return impl_->blocks_reread_.load(std::memory_order_relaxed); }
Status CheckpointReader::ReadBlocks(std::span<const uint32_t> blocks, std::span<const std::span<uint8_t>> outs,
                                    std::span<Status> statuses) const {
  return impl_->ReadBlocks(blocks, outs, statuses);
}

Status CheckpointReader::ReadPage(uint64_t g, std::span<uint8_t> out) const {
  if (out.size() != kPageSize) return Status::InvalidArgument("ReadPage needs a 4096-byte buffer");
  if (g >= total_pages()) return Status::InvalidArgument(name() + ": no page " + std::to_string(g));
  PageLocation loc = Locate(g);
  if (loc.kind != PageKind::kStored) {
    std::memset(out.data(), 0, kPageSize);
    return Status::Ok();
  }
  std::vector<uint8_t> raw(blocks()[loc.block].raw_length());
  HLT_RETURN_IF_ERROR(ReadBlock(loc.block, raw));
  std::memcpy(out.data(), raw.data() + size_t(loc.slot_in_block) * kPageSize, kPageSize);
  return Status::Ok();
}

Result<std::vector<uint8_t>> CheckpointReader::ReadBlob(uint32_t index) const { return impl_->ReadBlob(index); }
Result<std::vector<uint8_t>> CheckpointReader::ReadBlob(std::string_view name) const {
  const auto& bs = impl_->model_.blobs;
  for (size_t i = 0; i < bs.size(); ++i) {
    if (bs[i].name == name) return impl_->ReadBlob(uint32_t(i));
  }
  return Status::NotFound(impl_->file_->name() + ": no blob \"" + std::string(name) + "\"");
}

Status CheckpointReader::VerifyAll(const std::function<void(const VerifyProgress&)>& progress) const {
  VerifyProgress p;
  p.blocks_total = blocks().size();
  std::vector<uint8_t> raw;
  for (uint32_t b = 0; b < blocks().size(); ++b) {
    raw.resize(blocks()[b].raw_length());
    HLT_RETURN_IF_ERROR(ReadBlock(b, raw));
    p.blocks_done = b + 1;
    if (progress) progress(p);
  }
  for (uint32_t i = 0; i < blobs().size(); ++i) {
    auto r = ReadBlob(i);
    if (!r) return r.error();
  }
  return Status::Ok();
}

const char* VmmKindName(VmmKind kind) {
  switch (kind) {
    case VmmKind::kRaw: return "raw";
    case VmmKind::kQemu: return "qemu";
    case VmmKind::kXen: return "xen";
    case VmmKind::kOther: return "other";
  }
  return "?";
}

const char* PageKindName(PageKind kind) {
  switch (kind) {
    case PageKind::kAbsent: return "absent";
    case PageKind::kZero: return "zero";
    case PageKind::kStored: return "stored";
  }
  return "?";
}

}  // namespace halite
