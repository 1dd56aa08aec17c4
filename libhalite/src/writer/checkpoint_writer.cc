#include "halite/checkpoint_writer.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <random>

#include "codec/aead.h"
#include "codec/hashing.h"
#include "codec/mac.h"
#include "codec/zstd_codec.h"
#include "common/rate_limiter.h"
#include "common/worker_pool.h"
#include "halite/bytes.h"
#include "format/encryption_codec.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "format/integrity_checks.h"
#include "halite/checkpoint_location.h"
#include "halite/format_constants.h"
#include "writer/coding_choice.h"
#include "writer/layout_planner.h"
#include "writer/page_store.h"
#include "writer/parent_bases.h"

namespace halite {

using format::kPageSize;

Result<LayoutPolicy> ParseLayoutPolicy(std::string_view name) {
  if (name == "halite") return LayoutPolicy::kHalite;
  if (name == "access") return LayoutPolicy::kAccess;
  if (name == "va") return LayoutPolicy::kVa;
  if (name == "physical") return LayoutPolicy::kPhysical;
  return Status::InvalidArgument("unknown policy \"" + std::string(name) + "\" (expected halite, access, va or physical)");
}

const char* LayoutPolicyName(LayoutPolicy p) {
  switch (p) {
    case LayoutPolicy::kHalite: return "halite";
    case LayoutPolicy::kAccess: return "access";
    case LayoutPolicy::kVa: return "va";
    case LayoutPolicy::kPhysical: return "physical";
  }
  return "?";
}

Result<DictionaryMode> ParseDictionaryMode(std::string_view name) {
  if (name == "auto") return DictionaryMode::kAuto;
  if (name == "off") return DictionaryMode::kOff;
  if (name == "on") return DictionaryMode::kOn;
  return Status::InvalidArgument("unknown dictionary mode \"" + std::string(name) + "\" (expected auto, on or off)");
}

namespace {


struct BlockPayload {
  Status status;
  std::vector<uint8_t> bytes;
  uint32_t flags = 0;
  uint32_t base_page = 0;  // BASED
  std::array<uint8_t, 16> mac{};
};

uint64_t NowUnixNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

// From the operating system's random source: an encrypted file's nonces are unique because its file_id is
// (format-spec 13.1).
FileId RandomFileId() {
  FileId id;
  codec::RandomBytes(id);
  if (id == FileId{}) id[0] = 1;
  return id;
}

}  // namespace

class HALITE_HIDDEN CheckpointWriter::Impl {
 public:
  Impl(std::unique_ptr<AppendSink> sink, WriterOptions opt, std::string staging_dir)
      : sink_(std::move(sink)), opt_(std::move(opt)), staging_dir_(std::move(staging_dir)) {}
  ~Impl() {
    if (sink_) sink_->Abort();
  }

  Status Validate() {
    if (opt_.block_pages < 1 || opt_.block_pages > format::kMaxBlockPages) {
      return Status::InvalidArgument("block_pages " + std::to_string(opt_.block_pages) + " (expected 1..4096)");
    }
    if (opt_.level < -7 || opt_.level > codec::MaxCompressionLevel()) {
      return Status::InvalidArgument("zstd level " + std::to_string(opt_.level) + " (expected -7.." +
                                     std::to_string(codec::MaxCompressionLevel()) + ")");
    }
    auto bad_string = [](const std::string& s) {
      return s.size() > format::kMaxMetadataString || !format::IsPrintableAscii(s);
    };
    if (bad_string(opt_.metadata.machine_type) || bad_string(opt_.metadata.creator)) {
      return Status::InvalidArgument("metadata strings must be printable ASCII of at most 256 bytes");
    }
    if (opt_.file_id && *opt_.file_id == FileId{}) return Status::InvalidArgument("file_id must not be all zero");
    if (opt_.mac_key) HLT_RETURN_IF_ERROR(codec::InitMac());
    if (opt_.encryption_key) HLT_RETURN_IF_ERROR(ValidateEncryption());
    if (opt_.parent) {
      if (opt_.parent->chain_depth() + 1 > format::kMaxChainDepth) {
        return Status::InvalidArgument(opt_.parent->name() + ": already " + std::to_string(opt_.parent->chain_depth()) +
                                       " parent links deep; a child would exceed the limit of 16 (flatten it first)");
      }
      if (!(opt_.parent_rewrite_fraction >= 0)) {
        return Status::InvalidArgument("parent_rewrite_fraction " + std::to_string(opt_.parent_rewrite_fraction) +
                                       " (expected a fraction >= 0)");
      }
      if (!format::IsValidPathHint(opt_.parent_path_hint)) {
        return Status::InvalidArgument("parent path hint \"" + opt_.parent_path_hint +
                                       "\" is not a relative path of 1..1024 printable ASCII bytes");
      }
    }
    return Status::Ok();
  }

  // Format-spec 13 and section 10: the cipher, the key's id, and staging that never holds a plaintext page.
  Status ValidateEncryption() {
    if (opt_.mac_key) {
      return Status::InvalidArgument("mac_key and encryption_key: an encrypted checkpoint is authenticated by its "
                                     "AEAD tags; give one of them");
    }
    if (opt_.file_id && !opt_.deterministic) {
      return Status::InvalidArgument("file_id with encryption_key: an encrypted file's file_id must be fresh and "
                                     "random (its nonces depend on it)");
    }
    const Cipher cipher = opt_.cipher == Cipher::kAuto ? AutoCipher() : opt_.cipher;
    if (cipher != Cipher::kAes256Gcm && cipher != Cipher::kXChaCha20Poly1305) {
      return Status::InvalidArgument("unknown cipher " + std::to_string(uint32_t(cipher)));
    }
    cipher_number_ = static_cast<uint32_t>(cipher);
    HLT_ASSIGN_OR_RETURN(key_id_, ComputeKeyId(*opt_.encryption_key));
    return store_.EncryptStaging(static_cast<codec::AeadAlgorithm>(cipher_number_));
  }

  Result<uint32_t> AddRegion(const std::string& name, uint64_t base, uint64_t size, uint32_t hps) {
    if (finished_) return Status::InvalidArgument("AddRegion after Finish");
    if (name.empty() || name.size() > format::kMaxNameLength || !format::IsPrintableAscii(name)) {
      return Status::InvalidArgument("region name \"" + name + "\" must be 1..255 printable ASCII bytes");
    }
    for (auto& r : regions_) {
      if (r.name == name) return Status::InvalidArgument("duplicate region name \"" + name + "\"");
    }
    if (regions_.size() >= format::kMaxRegions) return Status::InvalidArgument("more than 1024 regions");
    if (hps < format::kMinHostPageSize || hps > format::kMaxHostPageSize || (hps & (hps - 1)) != 0) {
      return Status::InvalidArgument("host page size " + std::to_string(hps) + " (expected a power of two, 4096..2^30)");
    }
    if (size == 0 || size % hps != 0 || base % kPageSize != 0 || base + size < base) {
      return Status::InvalidArgument("region \"" + name + "\": size must be a non-zero multiple of the host page size "
                                     "and the base 4096-aligned");
    }
    if (store_.total_pages() + size / kPageSize > format::kMaxTotalPages) {
      return Status::InvalidArgument("regions exceed 2^31 pages (8 TiB)");
    }
    Region r{name, base, size, hps, store_.total_pages()};
    regions_.push_back(r);
    store_.Resize(store_.total_pages() + size / kPageSize);
    return uint32_t(regions_.size() - 1);
  }

  Status CheckPage(uint32_t region, uint64_t page, uint64_t count = 1) const {
    if (finished_) return Status::InvalidArgument("page given after Finish");
    if (region >= regions_.size()) return Status::InvalidArgument("no region " + std::to_string(region));
    uint64_t n = regions_[region].page_count();
    if (page >= n || count > n - page) {
      return Status::InvalidArgument("page " + std::to_string(page) + " is outside region \"" + regions_[region].name + "\"");
    }
    return Status::Ok();
  }

  bool Declared(uint64_t global_page) const { return global_page < declared_.size() && declared_[global_page]; }

  Status PutPage(uint32_t region, uint64_t page, std::span<const uint8_t> data) {
    HLT_RETURN_IF_ERROR(CheckPage(region, page));
    if (data.size() != kPageSize) return Status::InvalidArgument("a page is 4096 bytes");
    if (Declared(regions_[region].first_page + page)) return Status::Ok();  // known equal to the parent's
    return store_.Put(regions_[region].first_page + page, data, staging_dir_);
  }

  Status PutZeroPages(uint32_t region, uint64_t first, uint64_t count) {
    HLT_RETURN_IF_ERROR(CheckPage(region, first, count));
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t g = regions_[region].first_page + first + i;
      if (!Declared(g)) store_.PutZero(g);
    }
    return Status::Ok();
  }

  Status DeclareInParent(uint32_t region, uint64_t first, uint64_t count) {
    HLT_RETURN_IF_ERROR(CheckPage(region, first, count));
    if (!opt_.parent) return Status::InvalidArgument("DeclareInParent without a parent");
    const auto& parent_regions = opt_.parent->regions();
    const Region& r = regions_[region];
    if (region >= parent_regions.size() || parent_regions[region].name != r.name ||
        parent_regions[region].first_page != r.first_page || parent_regions[region].size < (first + count) * kPageSize) {
      return Status::InvalidArgument("region \"" + r.name + "\" is not laid out as the parent's region " +
                                     std::to_string(region) + " (" + opt_.parent->name() + ")");
    }
    if (declared_.size() < store_.total_pages()) declared_.resize(store_.total_pages());
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t g = r.first_page + first + i;
      declared_[g] = true;
      store_.Forget(g);  // whatever was given before is not needed
    }
    return Status::Ok();
  }

  Status ExtendLastRegion(uint64_t new_size) {
    if (finished_) return Status::InvalidArgument("ExtendLastRegion after Finish");
    if (regions_.empty()) return Status::InvalidArgument("ExtendLastRegion without a region");
    Region& r = regions_.back();
    if (new_size < r.size || new_size % r.host_page_size != 0) {
      return Status::InvalidArgument("region \"" + r.name + "\": new size " + std::to_string(new_size) +
                                     " is smaller than " + std::to_string(r.size) +
                                     " or not a multiple of the host page size");
    }
    if (r.first_page + new_size / kPageSize > format::kMaxTotalPages) {
      return Status::InvalidArgument("regions exceed 2^31 pages (8 TiB)");
    }
    r.size = new_size;
    store_.Resize(r.first_page + r.page_count());
    return Status::Ok();
  }

  Status ForgetPages(uint32_t region, uint64_t first, uint64_t count) {
    HLT_RETURN_IF_ERROR(CheckPage(region, first, count));
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t g = regions_[region].first_page + first + i;
      store_.Forget(g);
      if (Declared(g)) declared_[g] = false;  // taken back: absent now, whatever the parent holds
    }
    return Status::Ok();
  }

  PageContent ContentOf(uint32_t region, uint64_t page) const {
    if (region >= regions_.size() || page >= regions_[region].page_count()) return PageContent::kAbsent;
    if (const uint64_t g = regions_[region].first_page + page; Declared(g)) {
      const PageKind kind = opt_.parent->Locate(g).kind;
      return kind == PageKind::kStored ? PageContent::kData
             : kind == PageKind::kZero ? PageContent::kZero
                                       : PageContent::kAbsent;
    }
    switch (store_.state(regions_[region].first_page + page)) {
      case writer::PageState::kAbsent:
        return PageContent::kAbsent;
      case writer::PageState::kZero:
        return PageContent::kZero;
      default:
        return PageContent::kData;
    }
  }

  Result<bool> ReadPage(uint32_t region, uint64_t page, std::span<uint8_t, kPageSize> out) const {
    switch (ContentOf(region, page)) {
      case PageContent::kAbsent:
        return false;
      case PageContent::kZero:
        std::memset(out.data(), 0, kPageSize);
        return true;
      case PageContent::kData:
        break;
    }
    if (const uint64_t g = regions_[region].first_page + page; Declared(g)) {
      HLT_RETURN_IF_ERROR(opt_.parent->ReadPage(g, out));  // one parent block decoded (page-table walks only)
      return true;
    }
    HLT_RETURN_IF_ERROR(store_.Read(regions_[region].first_page + page, out.data()));
    return true;
  }

  Status AttachImage(uint32_t region, const std::string& path) {
    HLT_RETURN_IF_ERROR(CheckPage(region, 0));
    WorkerPool pool(opt_.threads, opt_.low_priority_workers);
    return store_.Attach(regions_[region].first_page, regions_[region].page_count(), path, &pool);
  }

  Status AddRuns(std::span<const PageRun> runs, std::vector<writer::GlobalRun>* out) {
    for (const auto& r : runs) {
      HLT_RETURN_IF_ERROR(CheckPage(r.first.region, r.first.page, r.count));
      out->push_back({regions_[r.first.region].first_page + r.first.page, r.count});
    }
    return Status::Ok();
  }
  Status AddAccessed(std::span<const PageRun> runs) { return AddRuns(runs, &access_); }
  Status AddVa(std::span<const PageRun> runs) { return AddRuns(runs, &va_); }

  Status AddBlob(const std::string& name, std::span<const uint8_t> data) {
    if (finished_) return Status::InvalidArgument("AddBlob after Finish");
    if (name.empty() || name.size() > format::kMaxNameLength || !format::IsPrintableAscii(name)) {
      return Status::InvalidArgument("blob name \"" + name + "\" must be 1..255 printable ASCII bytes");
    }
    if (data.size() > format::kMaxBlobRawLength) return Status::InvalidArgument("blob \"" + name + "\" exceeds 1 GiB");
    if (blobs_.size() >= format::kMaxBlobs) return Status::InvalidArgument("more than 4096 blobs");
    for (auto& b : blobs_) {
      if (b.first == name) return Status::InvalidArgument("duplicate blob name \"" + name + "\"");
    }
    blobs_.emplace_back(name, std::vector<uint8_t>(data.begin(), data.end()));
    return Status::Ok();
  }

  Result<WriteSummary> Finish();

  const std::vector<Region>& regions() const { return regions_; }

 private:
  Status Append(std::span<const uint8_t> bytes) { return sink_->Append(bytes); }
  std::vector<writer::PlannedPageKind> Kinds(bool zero_references_as_zero) const;
  // The regions for the planner: where host pages larger than 4 KiB keep their pages together.
  std::vector<writer::PlannerRegion> PlannerRegions() const;
  Result<writer::BlockPlan> Plan() const;
  Status MatchParent(WorkerPool& pool, uint64_t* blocks_read);
  uint64_t StoreAgainForLocality();
  Status ReadSlotPages(const writer::PlannedBlock& b, std::vector<uint8_t>* raw) const;
  // Incremental saves: which changed pages are coded against the parent (WriterOptions::code_against_parent).
  Status ChooseBases(WorkerPool& pool);
  // The coding of the blocks coded on their own (frames, dictionary): chosen from a sample.
  Result<writer::CodingChoice> ChooseCoding(const std::vector<writer::PlannedBlock>& blocks, WorkerPool& pool) const;
  // Compresses a block as `frame_pages` and `dict` say (a BASED one against its base group, without the
  // dictionary); in an encrypted file seals it too when `index` (its block number) is given (coding trials compare
  // sizes of unsealed blocks).
  BlockPayload EncodeBlock(const writer::PlannedBlock& b, uint32_t frame_pages, const codec::Dictionary* dict,
                           std::optional<uint32_t> index = std::nullopt) const;
  // 13.2: the content (what an unencrypted file stores) sealed into the block's payload.
  Status SealBlockPayload(uint32_t index, const writer::PlannedBlock& b, const codec::Dictionary* dict,
                          BlockPayload* p) const;
  Status WriteBlocks(const std::vector<writer::PlannedBlock>& blocks, const codec::Dictionary* dict, WorkerPool& pool,
                     format::IndexModel* model, uint64_t file_seed);
  Status WriteBlobs(format::IndexModel* model, uint64_t file_seed);
  Result<format::Footer> AppendIndexAndFooter(format::IndexModel& model, std::span<const uint8_t> header_bytes,
                                              uint64_t file_seed, uint64_t* index_bytes);
  Result<std::vector<uint8_t>> AppendHeader(const format::IndexModel& model,
                                            const std::vector<writer::PlannedBlock>& blocks);

  std::unique_ptr<AppendSink> sink_;
  WriterOptions opt_;
  std::string staging_dir_;
  std::vector<Region> regions_;
  writer::PageStore store_;
  std::vector<writer::GlobalRun> access_, va_;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> blobs_;
  std::vector<uint32_t> slot_page_;  // slot -> global page holding the canonical copy
  std::vector<bool> in_parent_;      // pages equal to the parent's (MatchParent)
  std::vector<bool> declared_;       // pages the caller declared equal to the parent's (DeclareInParent)
  std::vector<uint8_t> stored_again_;  // equal to the parent's, stored again for locality (StoreAgainForLocality)
  writer::BaseChoice bases_;         // changed pages coded against the parent (ChooseBases)
  uint32_t frame_pages_ = 0;         // the chosen coding (ChooseCoding)
  FileId file_id_{};
  bool finished_ = false;
  // Format-spec 13: set when encrypting (ValidateEncryption; the file key once the file_id is chosen).
  uint32_t cipher_number_ = 0;
  KeyId key_id_{};
  std::shared_ptr<const format::FileCipher> cipher_;
};

Status CheckpointWriter::Impl::ReadSlotPages(const writer::PlannedBlock& b, std::vector<uint8_t>* raw) const {
  raw->resize(size_t(b.pages) * kPageSize);
  for (uint32_t i = 0; i < b.pages; ++i) {
    HLT_RETURN_IF_ERROR(store_.Read(slot_page_[b.first_slot + i], raw->data() + size_t(i) * kPageSize));
  }
  return Status::Ok();
}

BlockPayload CheckpointWriter::Impl::EncodeBlock(const writer::PlannedBlock& b, uint32_t frame_pages,
                                                 const codec::Dictionary* dict, std::optional<uint32_t> index) const {
  thread_local codec::Compressor compressor;
  thread_local std::vector<uint8_t> base;
  BlockPayload out;
  std::vector<uint8_t> raw;
  out.status = ReadSlotPages(b, &raw);
  if (!out.status.ok()) return out;
  const bool based = b.base_key != writer::kNoBase;
  codec::FrameReference ref(dict);
  if (based) {
    // 5.4: against the raw content of the parent's block group holding the parent's version of its first slot.
    const uint32_t group = bases_.group_of_key[b.base_key];
    base.resize(opt_.parent->blocks()[group].raw_length());
    out.status = opt_.parent->ReadBlock(group, base);
    if (!out.status.ok()) return out;
    ref = codec::FrameReference::Prefix(base);
  }
  const size_t cut_bytes = size_t(opt_.zstd_block_pages) * kPageSize;
  const bool framed = frame_pages > 0 && b.pages > frame_pages;
  out.status = framed ? compressor.CompressFrames(raw, opt_.level, ref, &out.bytes, size_t(frame_pages) * kPageSize,
                                                  cut_bytes)
                      : compressor.Compress(raw, opt_.level, ref, &out.bytes, cut_bytes);
  if (!out.status.ok()) return out;
  if (out.bytes.size() < raw.size()) {
    out.flags = format::kBlockCompressed | (framed ? format::kBlockFramed : 0);
    if (based) {
      out.flags |= format::kBlockBased;
      out.base_page = slot_page_[b.first_slot];
    } else if (dict) {
      out.flags |= format::kBlockDictionary;
    }
  } else {
    out.bytes = std::move(raw);  // does not compress: stored raw
    out.flags = 0;
  }
  if (b.hot) out.flags |= format::kBlockHot;
  if (cipher_ && index) out.status = SealBlockPayload(*index, b, dict, &out);
  return out;  // the MAC, when wanted, is computed by the caller that knows the block's index
}

Status CheckpointWriter::Impl::SealBlockPayload(uint32_t index, const writer::PlannedBlock& b,
                                                const codec::Dictionary* dict, BlockPayload* p) const {
  BlockInfo info;
  info.page_count = b.pages;
  info.flags = p->flags;
  std::vector<codec::FrameExtent> frames;
  if (info.framed()) {
    // The frames as the compressor cut them: each is sealed on its own (13.2).
    // A BASED block's frames name no dictionary (they are coded against a prefix).
    const codec::Dictionary* frame_dict = info.uses_dictionary() ? dict : nullptr;
    HLT_ASSIGN_OR_RETURN(frames, codec::SplitFrames(p->bytes, frame_dict, info.raw_length(), kPageSize));
  }
  std::vector<uint8_t> sealed = format::SealBlock(*cipher_, index, info, p->bytes, frames);
  codec::Wipe(p->bytes);
  p->bytes = std::move(sealed);
  return Status::Ok();
}

Result<writer::CodingChoice> CheckpointWriter::Impl::ChooseCoding(const std::vector<writer::PlannedBlock>& blocks,
                                                                  WorkerPool& pool) const {
  std::vector<writer::PlannedBlock> own;  // BASED blocks are coded against the parent, not with these choices
  for (const auto& b : blocks) {
    if (b.base_key == writer::kNoBase) own.push_back(b);
  }
  writer::CodingChoiceOptions options{opt_.dictionary, opt_.frame_pages, opt_.level};
  return writer::ChooseCoding(
      options, slot_page_.size(), own, pool,
      [&](uint64_t slot, uint8_t* out) { return store_.Read(slot_page_[slot], out); },
      [&](const writer::PlannedBlock& b, uint32_t frames, const codec::Dictionary* d) -> int64_t {
        BlockPayload p = EncodeBlock(b, frames, d);
        return p.status.ok() ? int64_t(p.bytes.size()) : -1;
      });
}

Status CheckpointWriter::Impl::ChooseBases(WorkerPool& pool) {
  const std::vector<writer::PlannedPageKind> kinds = Kinds(/*zero_references_as_zero=*/false);
  std::vector<uint8_t> excluded(kinds.size());
  if (opt_.policy == LayoutPolicy::kHalite || opt_.policy == LayoutPolicy::kAccess) {
    for (const auto& r : access_) std::fill_n(excluded.begin() + long(r.first), r.count, 1);  // the working set
  }
  for (uint64_t g = 0; g < stored_again_.size(); ++g) excluded[g] |= stored_again_[g];
  for (const Region& r : regions_) {
    if (opt_.keep_host_pages_whole && r.host_page_size > kPageSize) {
      std::fill_n(excluded.begin() + long(r.first_page), r.page_count(), 1);  // installed a host page at a time
    }
  }
  writer::BaseChoiceInput in{opt_.parent.get(), kinds, excluded, opt_.level};
  HLT_ASSIGN_OR_RETURN(bases_, writer::ChooseBases(in, pool, [&](uint64_t g, uint8_t* out) { return store_.Read(g, out); }));
  return Status::Ok();
}

Status CheckpointWriter::Impl::WriteBlocks(const std::vector<writer::PlannedBlock>& blocks, const codec::Dictionary* dict,
                                           WorkerPool& pool, format::IndexModel* model, uint64_t file_seed) {
  const uint32_t frame_pages = frame_pages_;
  RateLimiter limiter(opt_.rate_limit_bytes_per_s);
  WriteProgress progress;
  progress.blocks_total = blocks.size();
  progress.raw_bytes_total = slot_page_.size() * kPageSize;
  // A sliding window of compressions in flight; results are written strictly in block order.
  std::deque<std::future<BlockPayload>> window;
  size_t next = 0;
  const size_t max_in_flight = size_t(pool.size()) * 2;
  model->blocks.reserve(blocks.size());
  while (next < blocks.size() || !window.empty()) {
    while (next < blocks.size() && window.size() < max_in_flight) {
      const writer::PlannedBlock& b = blocks[next++];
      limiter.Acquire(uint64_t(b.pages) * kPageSize);
      const uint32_t index = uint32_t(next - 1);
      window.push_back(pool.Submit([this, &b, frame_pages, dict, index] { return EncodeBlock(b, frame_pages, dict, index); }));
    }
    BlockPayload p = window.front().get();
    window.pop_front();
    if (!p.status.ok()) {
      for (auto& f : window) f.wait();  // tasks reference locals: let them finish before unwinding
      return p.status;
    }
    size_t index = model->blocks.size();
    const writer::PlannedBlock& b = blocks[index];
    if (opt_.mac_key) model->mac.block_macs.push_back(format::ComputePayloadMac(*opt_.mac_key, format::kBlockMacTag, file_id_, index, p.bytes));
    BlockInfo info;
    info.offset = sink_->position();
    info.stored_length = uint32_t(p.bytes.size());
    info.page_count = b.pages;
    info.flags = p.flags;
    info.base_page = p.base_page;
    info.checksum = codec::Xxh3_64(p.bytes, format::BlockSeed(file_seed, index));
    model->blocks.push_back(info);
    Status s = Append(p.bytes);
    if (!s.ok()) {
      for (auto& f : window) f.wait();
      return s;
    }
    progress.blocks_done = index + 1;
    progress.raw_bytes_done += uint64_t(b.pages) * kPageSize;
    if (opt_.progress) opt_.progress(progress);
  }
  return Status::Ok();
}

Status CheckpointWriter::Impl::WriteBlobs(format::IndexModel* model, uint64_t file_seed) {
  codec::Compressor compressor;
  for (size_t i = 0; i < blobs_.size(); ++i) {
    const auto& [name, raw] = blobs_[i];
    std::vector<uint8_t> packed;
    BlobInfo info;
    info.name = name;
    info.raw_length = raw.size();
    HLT_RETURN_IF_ERROR(compressor.Compress(raw, opt_.level, nullptr, &packed));
    std::span<const uint8_t> payload = raw;
    if (!raw.empty() && packed.size() < raw.size()) {
      payload = packed;
      info.flags = format::kBlobCompressed;
    }
    std::vector<uint8_t> sealed;
    if (cipher_) {
      // 13.3: the blob's content sealed; its stored length counts the tag.
      info.stored_length = payload.size() + format::kSealTagSize;
      sealed.resize(info.stored_length);
      cipher_->Seal(format::BlobUnitAd(i, info), payload, sealed);
      payload = sealed;
    }
    info.offset = sink_->position();
    info.stored_length = payload.size();
    info.checksum = codec::Xxh3_64(payload, format::BlobSeed(file_seed, i));
    if (opt_.mac_key) model->mac.blob_macs.push_back(format::ComputePayloadMac(*opt_.mac_key, format::kBlobMacTag, file_id_, i, payload));
    HLT_RETURN_IF_ERROR(Append(payload));
    model->blobs.push_back(std::move(info));
  }
  return Status::Ok();
}

// Stage: every page went into the store through Put/Attach; plan: the pure planner decides the layout from the
// pages' kinds and hashes and the hints.
std::vector<writer::PlannedPageKind> CheckpointWriter::Impl::Kinds(bool zero_references_as_zero) const {
  const uint64_t total = store_.total_pages();
  std::vector<writer::PlannedPageKind> kinds(total);
  for (uint64_t g = 0; g < total; ++g) {
    const writer::PageState st = store_.state(g);
    kinds[g] = st == writer::PageState::kStaged || st == writer::PageState::kImage ? writer::PlannedPageKind::kContent
               : st == writer::PageState::kZero                                   ? writer::PlannedPageKind::kZero
                                                                                  : writer::PlannedPageKind::kAbsent;
    const bool reference = g < in_parent_.size() && in_parent_[g];
    if (reference && (!zero_references_as_zero || kinds[g] == writer::PlannedPageKind::kContent || Declared(g))) {
      kinds[g] = writer::PlannedPageKind::kInParent;
    }
  }
  return kinds;
}

std::vector<writer::PlannerRegion> CheckpointWriter::Impl::PlannerRegions() const {
  std::vector<writer::PlannerRegion> out;
  for (const Region& r : regions_) {
    const uint64_t unit = opt_.keep_host_pages_whole ? std::max<uint64_t>(1, r.host_page_size / kPageSize) : 1;
    out.push_back({r.first_page, r.page_count(), uint32_t(unit)});
  }
  return out;
}

// Incremental saves: the references worth storing again so that no block of the flat layout is split between the
// child and its parent (WriterOptions::parent_rewrite_fraction). Zero and absent references stay references: a
// flat checkpoint stores no bytes for them either. Declared pages have no bytes here and stay references.
uint64_t CheckpointWriter::Impl::StoreAgainForLocality() {
  const std::vector<writer::PlannedPageKind> kinds = Kinds(/*zero_references_as_zero=*/true);
  writer::PlannerInput in;
  in.policy = opt_.policy;
  in.block_pages = opt_.block_pages;
  in.pages = kinds;
  in.access = access_;
  in.va = va_;
  const std::vector<writer::PlannerRegion> regions = PlannerRegions();
  in.regions = regions;
  const std::vector<uint64_t> again = writer::PagesToStoreAgain(in, declared_, opt_.parent_rewrite_fraction);
  stored_again_.assign(store_.total_pages(), 0);
  for (uint64_t g : again) {
    in_parent_[g] = false;
    stored_again_[g] = 1;
  }
  return again.size();
}

Result<writer::BlockPlan> CheckpointWriter::Impl::Plan() const {
  const uint64_t total = store_.total_pages();
  std::vector<writer::PlannedPageKind> kinds = Kinds(/*zero_references_as_zero=*/false);
  std::vector<codec::Hash128> hashes(total);
  for (uint64_t g = 0; g < total; ++g) hashes[g] = store_.hash(g);
  writer::PlannerInput in;
  in.policy = opt_.policy;
  in.block_pages = opt_.block_pages;
  in.pages = kinds;
  in.hashes = hashes;
  in.access = access_;
  in.va = va_;
  const std::vector<writer::PlannerRegion> regions = PlannerRegions();
  in.regions = regions;
  in.base_keys = bases_.keys;
  std::vector<uint8_t> a(kPageSize), b(kPageSize);
  return writer::PlanBlocks(in, [&](uint64_t x, uint64_t y) -> Result<bool> {
    HLT_RETURN_IF_ERROR(store_.Read(x, a.data()));
    HLT_RETURN_IF_ERROR(store_.Read(y, b.data()));
    return a == b;
  });
}

// Format-spec 12: which pages equal the parent's view of the same page. A zero (absent) page whose parent page is
// zero (absent) too is IN_PARENT for free. Content pages are candidates where the parent stores the page and its
// PAGE_HASHES entry, when the parent has one, equals this page's hash; each candidate is then compared byte for
// byte with the parent's decoded page, one parent block decoded per block holding a candidate, blocks decoded in
// parallel.
Status CheckpointWriter::Impl::MatchParent(WorkerPool& pool, uint64_t* blocks_read) {
  const CheckpointReader& parent = *opt_.parent;
  const uint64_t limit = std::min(store_.total_pages(), parent.total_pages());
  std::vector<uint8_t> candidate(limit);
  std::vector<uint8_t> block_wanted(parent.blocks().size());
  in_parent_.assign(store_.total_pages(), false);
  for (uint64_t g = 0; g < limit; ++g) {
    if (Declared(g)) {
      in_parent_[g] = true;  // the caller knows; nothing to compare
      continue;
    }
    const writer::PageState st = store_.state(g);
    const PageLocation loc = parent.Locate(g);
    if (st == writer::PageState::kZero || st == writer::PageState::kAbsent) {
      in_parent_[g] = loc.kind == (st == writer::PageState::kZero ? PageKind::kZero : PageKind::kAbsent);
      continue;
    }
    if (loc.kind != PageKind::kStored) continue;
    std::optional<uint64_t> hash = parent.PageHash(g);
    if (hash && *hash != store_.hash(g).low) continue;
    candidate[g] = 1;
    block_wanted[loc.block] = 1;
  }
  auto compare_block = [&](uint32_t b) -> Result<std::vector<uint32_t>> {
    std::vector<uint8_t> raw(parent.blocks()[b].raw_length()), page(kPageSize);
    HLT_RETURN_IF_ERROR(parent.ReadBlock(b, raw));
    std::vector<uint32_t> equal;
    for (const BlockMember& m : parent.BlockMembers(b)) {
      if (m.page >= limit || !candidate[m.page]) continue;
      HLT_RETURN_IF_ERROR(store_.Read(m.page, page.data()));
      if (std::memcmp(page.data(), raw.data() + size_t(m.slot) * kPageSize, kPageSize) == 0) equal.push_back(m.page);
    }
    return equal;
  };
  std::deque<std::future<Result<std::vector<uint32_t>>>> window;
  const size_t max_in_flight = size_t(pool.size()) * 2;
  uint32_t next = 0;
  const uint32_t nblocks = uint32_t(block_wanted.size());
  Status failed;
  while (next < nblocks || !window.empty()) {
    while (next < nblocks && window.size() < max_in_flight) {
      const uint32_t b = next++;
      if (!block_wanted[b]) continue;
      ++*blocks_read;
      window.push_back(pool.Submit([&compare_block, b] { return compare_block(b); }));
    }
    if (window.empty()) continue;
    auto r = window.front().get();
    window.pop_front();
    if (!r) {
      for (auto& f : window) f.wait();  // tasks reference locals: let them finish before unwinding
      return r.error().WithContext("comparing with the parent");
    }
    for (uint32_t g : *r) in_parent_[g] = true;
  }
  return Status::Ok();
}

// Append: the index (with its MAC when keyed) and the footer, whose magic ends the file.
Result<format::Footer> CheckpointWriter::Impl::AppendIndexAndFooter(format::IndexModel& model,
                                                                    std::span<const uint8_t> header_bytes,
                                                                    uint64_t file_seed, uint64_t* index_bytes) {
  std::vector<uint8_t> index;
  if (cipher_) {
    // 13.4 and 13.5: the sections that reveal content sealed, then the tag over the header and the index.
    const format::SectionSealer seal = [this](uint32_t type, uint32_t flags, std::span<const uint8_t> plain) {
      std::vector<uint8_t> sealed(plain.size() + format::kSealTagSize);
      cipher_->Seal(format::SectionUnitAd(type, flags, sealed.size()), plain, sealed);
      return sealed;
    };
    index = format::EncodeIndex(model, &seal);
    const format::IndexTag tag = format::ComputeIndexTag(*cipher_, header_bytes, index);
    auto section = format::EncodeEncryptionSection(cipher_number_, tag);
    index.insert(index.end(), section.begin(), section.end());
  } else {
    index = format::EncodeIndex(model);
  }
  if (opt_.mac_key) {
    // The MAC covers the header and every index byte before the MAC section.
    model.mac.present = true;
    model.mac.index_mac = format::ComputeIndexMac(*opt_.mac_key, header_bytes, index);
    auto mac_section = format::EncodeMacSection(model.mac);
    index.insert(index.end(), mac_section.begin(), mac_section.end());
  }
  format::Footer footer;
  footer.index_offset = sink_->position();
  footer.index_length = index.size();
  footer.file_size = footer.index_offset + index.size() + format::kFooterSize;
  footer.file_id = file_id_;
  footer.index_checksum = codec::Xxh3_64(index, file_seed);
  HLT_RETURN_IF_ERROR(Append(index));
  auto fb = format::EncodeFooter(footer);
  HLT_RETURN_IF_ERROR(Append(fb));
  *index_bytes = index.size();
  return footer;
}

// The header, before any block is compressed: a file that may hold FRAMED blocks says 1.3, and one that may hold
// BASED blocks 1.4, even when each of them turns out not to compress (then stored raw, neither FRAMED nor BASED).
Result<std::vector<uint8_t>> CheckpointWriter::Impl::AppendHeader(const format::IndexModel& model,
                                                                  const std::vector<writer::PlannedBlock>& blocks) {
  format::Header header;
  header.file_id = file_id_;
  header.minor = format::MinimumMinorVersion(model);
  const bool may_frame = frame_pages_ > 0 && std::any_of(blocks.begin(), blocks.end(), [&](const auto& b) {
                           return b.pages > frame_pages_;
                         });
  if (may_frame) header.minor = std::max(header.minor, format::kFormatMinorFramedBlocks);
  const bool may_base = std::any_of(blocks.begin(), blocks.end(), [](const auto& b) { return b.base_key != writer::kNoBase; });
  if (may_base) header.minor = std::max(header.minor, format::kFormatMinorBasedBlocks);
  if (opt_.mac_key) header.flags |= format::kHeaderAuthenticated;
  if (cipher_) {  // format-spec 13: the flag and the key id (MinimumMinorVersion saw model.encryption: 1.5)
    header.flags |= format::kHeaderEncrypted;
    header.key_id = key_id_;
  }
  auto hb = format::EncodeHeader(header);
  HLT_RETURN_IF_ERROR(Append(hb));
  return std::vector<uint8_t>(hb.begin(), hb.end());
}

// stage -> plan -> choose the coding -> compress -> append.
Result<WriteSummary> CheckpointWriter::Impl::Finish() {
  if (finished_) return Status::InvalidArgument("Finish called twice");
  finished_ = true;
  auto t0 = std::chrono::steady_clock::now();
  if (regions_.empty()) return Status::InvalidArgument("a checkpoint needs at least one region");
  HLT_RETURN_IF_ERROR(store_.Seal());  // stage

  WorkerPool pool(opt_.threads, opt_.low_priority_workers);
  WriteSummary sum;
  if (opt_.parent) {  // incremental (format-spec 12)
    HLT_RETURN_IF_ERROR(MatchParent(pool, &sum.parent_blocks_read));
    sum.stored_again_pages = StoreAgainForLocality();
    if (opt_.code_against_parent) HLT_RETURN_IF_ERROR(ChooseBases(pool));
  }
  HLT_ASSIGN_OR_RETURN(writer::BlockPlan plan, Plan());  // plan
  slot_page_ = std::move(plan.slot_page);

  format::IndexModel model;
  if (plan.in_parent_pages > 0) {
    const CheckpointReader& parent = *opt_.parent;
    model.parent = format::ParentSection{parent.file_id(), parent.index_fingerprint(), parent.total_pages(),
                                         parent.chain_depth() + 1, opt_.parent_path_hint};
  }
  if (opt_.page_hashes) {
    // 5.11: the hash of the page each slot holds (the store hashed every page as it came in).
    model.page_hashes.resize(slot_page_.size());
    for (uint64_t s = 0; s < slot_page_.size(); ++s) model.page_hashes[s] = store_.hash(slot_page_[s]).low;
  }
  HLT_ASSIGN_OR_RETURN(writer::CodingChoice coding, ChooseCoding(plan.blocks, pool));
  frame_pages_ = coding.frame_pages;
  // 5.12: what the writer chose itself, and on what evidence.
  const bool chose = (!coding.trials.empty() && (opt_.frame_pages == WriterOptions::kFramePagesAuto ||
                                                 opt_.dictionary == DictionaryMode::kAuto)) ||
                     bases_.groups_tried > 0;
  if (chose) {
    model.coding = CodingRecord{frame_pages_,
                                uint32_t(coding.sample_blocks),
                                coding.sample_raw_bytes,
                                uint32_t(std::min<uint64_t>(bases_.groups_tried, UINT32_MAX)),
                                uint32_t(std::min<uint64_t>(bases_.groups_used, UINT32_MAX)),
                                coding.trials};
  }

  file_id_ = opt_.file_id.value_or(RandomFileId());
  const uint64_t seed = format::FileSeed(file_id_);
  if (opt_.encryption_key) {
    HLT_ASSIGN_OR_RETURN(cipher_, format::FileCipher::Derive(*opt_.encryption_key, file_id_, cipher_number_));
    model.encryption.present = true;
    model.encryption.cipher = cipher_number_;
  }
  // 5.3: the page map is known from the plan; whether it is packed (1.6) decides the header's minor version.
  model.page_map = std::move(plan.page_map);
  model.regions = regions_;
  HLT_RETURN_IF_ERROR(format::ChoosePageMapPacking(&model));
  HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> hb, AppendHeader(model, plan.blocks));
  // compress (and append each block as it is ready, in block order)
  HLT_RETURN_IF_ERROR(WriteBlocks(plan.blocks, coding.dictionary.get(), pool, &model, seed));
  HLT_RETURN_IF_ERROR(WriteBlobs(&model, seed));

  // append the index and the footer
  model.metadata = opt_.metadata;
  if (!opt_.deterministic && model.metadata.created_unix_ns == 0) model.metadata.created_unix_ns = NowUnixNs();
  model.regions = regions_;
  model.restore_order = plan.restore_order;
  model.working_set_blocks = plan.working_set_blocks;
  if (coding.dictionary && std::any_of(model.blocks.begin(), model.blocks.end(), [](const BlockInfo& b) { return b.uses_dictionary(); })) {
    model.dictionary = coding.dictionary->bytes();
  }
  uint64_t index_bytes = 0;
  HLT_ASSIGN_OR_RETURN(format::Footer footer, AppendIndexAndFooter(model, hb, seed, &index_bytes));
  HLT_RETURN_IF_ERROR(sink_->Commit());
  sink_.reset();

  sum.pages = store_.total_pages();
  sum.raw_bytes = sum.pages * kPageSize;
  sum.zero_pages = plan.zero_pages;
  sum.absent_pages = plan.absent_pages;
  sum.duplicate_pages = plan.duplicate_pages;
  sum.stored_pages = slot_page_.size();
  sum.accessed_pages = plan.accessed_pages;
  sum.blocks = plan.blocks.size();
  sum.hot_blocks = model.working_set_blocks;
  for (auto& bl : model.blocks) {
    sum.block_bytes += bl.stored_length;
    sum.based_blocks += bl.based();
    sum.based_pages += bl.based() ? bl.page_count : 0;
  }
  for (auto& bl : model.blobs) sum.blob_bytes += bl.stored_length;
  sum.index_bytes = index_bytes;
  sum.dictionary_bytes = model.dictionary.size();
  sum.frame_pages = frame_pages_;
  sum.coding_trials = std::move(coding.trials);
  sum.coding_reason = std::move(coding.reason);
  sum.base_groups_tried = bases_.groups_tried;
  sum.base_groups_used = bases_.groups_used;
  sum.in_parent_pages = plan.in_parent_pages;
  for (uint64_t g = 0; g < declared_.size(); ++g) sum.declared_in_parent_pages += declared_[g] ? 1 : 0;
  sum.page_hash_bytes = model.page_hashes.empty() ? 0 : format::kSectionHeaderSize + format::kPageHashesFixedSize +
                                                            8 * model.page_hashes.size();
  sum.file_bytes = footer.file_size;
  sum.encrypted = cipher_ != nullptr;
  if (cipher_) {
    sum.cipher = static_cast<Cipher>(cipher_number_);
    sum.key_id = key_id_;
  }
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

// --- public shell ---

CheckpointWriter::CheckpointWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointWriter::~CheckpointWriter() = default;

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(std::unique_ptr<AppendSink> sink,
                                                                   WriterOptions options) {
  std::string staging = options.staging_dir.empty() ? std::string("/tmp") : options.staging_dir;
  auto impl = std::make_unique<Impl>(std::move(sink), std::move(options), staging);
  HLT_RETURN_IF_ERROR(impl->Validate());
  return std::unique_ptr<CheckpointWriter>(new CheckpointWriter(std::move(impl)));
}

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(const std::string& path, WriterOptions options) {
  if (IsObjectStoreUri(path)) {
    // An object has no directory: the parent must sit beside it (same bucket or pool, same key prefix), and
    // staging goes to the local temporary directory.
    if (options.parent && options.parent_path_hint.empty()) {
      const std::string& pname = options.parent->name();
      const auto slash = path.rfind('/');
      if (pname.size() <= slash + 1 || pname.compare(0, slash + 1, path, 0, slash + 1) != 0 ||
          pname.find('/', slash + 1) != std::string::npos) {
        return Status::InvalidArgument(path + ": the parent " + pname +
                                       " must be an object beside it (same bucket or pool and key prefix)");
      }
      options.parent_path_hint = pname.substr(slash + 1);
    }
    if (options.staging_dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      options.staging_dir = tmp && *tmp ? tmp : "/tmp";
    }
    HLT_ASSIGN_OR_RETURN(auto sink, CreateCheckpointSink(path, options.sink));
    return Create(std::move(sink), std::move(options));
  }
  if (options.parent && options.parent_path_hint.empty()) {
    // Format-spec 12: the hint is relative to the child's directory.
    namespace fs = std::filesystem;
    std::error_code ec1, ec2;
    fs::path out_dir = fs::absolute(fs::path(path), ec1).parent_path().lexically_normal();
    fs::path parent_path = fs::absolute(fs::path(options.parent->name()), ec2).lexically_normal();
    if (ec1 || ec2) return Status::IoError("cannot make the parent's path relative to " + path);
    options.parent_path_hint = parent_path.lexically_relative(out_dir).generic_string();
    if (!format::IsValidPathHint(options.parent_path_hint)) {
      return Status::InvalidArgument(options.parent->name() + ": its path relative to " + out_dir.generic_string() +
                                     " (\"" + options.parent_path_hint +
                                     "\") cannot be a path hint (printable ASCII, at most 1024 bytes)");
    }
  }
  if (options.staging_dir.empty()) {
    auto slash = path.rfind('/');
    options.staging_dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  }
  HLT_ASSIGN_OR_RETURN(auto sink, CreateAtomicFileSink(path, options.sink));
  return Create(std::move(sink), std::move(options));
}

Result<uint32_t> CheckpointWriter::AddRegion(const std::string& name, uint64_t base, uint64_t size, uint32_t hps) {
  return impl_->AddRegion(name, base, size, hps);
}
const std::vector<Region>& CheckpointWriter::regions() const { return impl_->regions(); }
Status CheckpointWriter::PutPage(uint32_t region, uint64_t page, std::span<const uint8_t> data) {
  return impl_->PutPage(region, page, data);
}
Status CheckpointWriter::ExtendLastRegion(uint64_t new_size) { return impl_->ExtendLastRegion(new_size); }
Status CheckpointWriter::ForgetPages(uint32_t region, uint64_t first, uint64_t count) {
  return impl_->ForgetPages(region, first, count);
}
CheckpointWriter::PageContent CheckpointWriter::ContentOf(uint32_t region, uint64_t page) const {
  return impl_->ContentOf(region, page);
}
Result<bool> CheckpointWriter::ReadPage(uint32_t region, uint64_t page, std::span<uint8_t, 4096> out) const {
  return impl_->ReadPage(region, page, out);
}
Status CheckpointWriter::PutZeroPages(uint32_t region, uint64_t first, uint64_t count) {
  return impl_->PutZeroPages(region, first, count);
}
Status CheckpointWriter::DeclareInParent(uint32_t region, uint64_t first, uint64_t count) {
  return impl_->DeclareInParent(region, first, count);
}
Status CheckpointWriter::AttachImage(uint32_t region, const std::string& path) { return impl_->AttachImage(region, path); }
Status CheckpointWriter::AddAccessedPages(std::span<const PageRun> runs) { return impl_->AddAccessed(runs); }
Status CheckpointWriter::AddVaRuns(std::span<const PageRun> runs) { return impl_->AddVa(runs); }
Status CheckpointWriter::AddBlob(const std::string& name, std::span<const uint8_t> data) {
  return impl_->AddBlob(name, data);
}
Result<WriteSummary> CheckpointWriter::Finish() { return impl_->Finish(); }

}  // namespace halite
