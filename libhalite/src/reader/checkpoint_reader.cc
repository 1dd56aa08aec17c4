#include "halite/checkpoint_reader.h"

#include <algorithm>
#include <mutex>
#include <atomic>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "codec/hashing.h"
#include "codec/mac.h"
#include "codec/zstd_codec.h"
#include "halite/bytes.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "format/integrity_checks.h"
#include "halite/checkpoint_location.h"
#include "halite/format_constants.h"
#include "reader/reader_impl.h"

namespace halite {

using format::kPageSize;


// With a key, any failure to open the file itself is a failure to authenticate. Chain errors (section 12) are
// about other files and keep their own codes.
Status CheckpointReader::Impl::OpenStandalone() {
  if (options_.mac_key) {
    Status init = codec::InitMac();
    if (!init.ok()) return init.WithContext(file_->name());
  }
  Status s = OpenChecked();
  if (!s.ok() && options_.mac_key && s.code() == StatusCode::kCorrupt) {
    return Status::AuthFailed("cannot authenticate: " + s.message());
  }
  counters_at_open_ = file_->counters();
  return s;
}

Status CheckpointReader::Impl::OpenChain(const std::vector<FileId>& descendants) {
  if (sealed_) return BuildView();  // no page map: no parent to follow, no page to locate (13.7)
  HLT_RETURN_IF_ERROR(OpenParent(descendants));
  // Only now, with the parent verified, 4 bytes a page for a sparse page map (5.3): its page count is the parent's
  // (whose own map is in its file), plus the pages listed here.
  model_.MaterializePageMap();
  return BuildView();
}

namespace {

std::string HexFileId(const std::array<uint8_t, 16>& id) {
  std::string out;
  for (uint8_t b : id) out += fmt::format("{:02x}", b);
  return out;
}

// Candidate paths of a parent (section 12): the hint relative to the child's directory, then the hint's last
// component in each extra directory.
std::vector<std::string> ParentCandidates(const std::string& child, const std::string& hint,
                                          const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  auto slash = child.rfind('/');
  out.push_back(slash == std::string::npos ? hint : child.substr(0, slash + 1) + hint);
  auto hint_slash = hint.rfind('/');
  std::string base = hint_slash == std::string::npos ? hint : hint.substr(hint_slash + 1);
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    std::string c = d.back() == '/' ? d + base : d + "/" + base;
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

}  // namespace

Status CheckpointReader::Impl::OpenParent(const std::vector<FileId>& descendants) {
  if (!model_.parent) return Status::Ok();
  const format::ParentSection& ref = *model_.parent;
  const std::string& name = file_->name();
  const uint32_t limit = std::min(options_.max_chain_depth, format::kMaxChainDepth);
  if (ref.chain_depth > limit) {
    return Status::Corrupt(fmt::format("{}: chain of {} parent links (parent \"{}\") exceeds this reader's limit of {}",
                                       name, ref.chain_depth, ref.path_hint, limit));
  }
  std::vector<FileId> chain_ids = descendants;
  chain_ids.push_back(header_.file_id);
  const auto candidates = ParentCandidates(name, ref.path_hint, options_.parent_dirs);
  Status first_error;
  for (const std::string& candidate : candidates) {
    auto file = options_.open_parent ? options_.open_parent(candidate) : OpenCheckpointFile(candidate, options_.file);
    Status error;
    if (!file) {
      error = file.error().WithContext(fmt::format("{}: parent (path hint \"{}\")", name, ref.path_hint));
      if (first_error.ok()) first_error = error;
      continue;
    }
    ReaderOptions parent_options = options_;
    parent_options.open_without_key = false;  // a chain is opened with every key or not at all
    auto impl = std::make_unique<Impl>(std::move(*file), std::move(parent_options));
    const std::string& pname = impl->file_->name();
    error = impl->OpenStandalone();
    if (error.code() == StatusCode::kAuthFailed && impl->header_.encrypted() && impl->header_.file_id == ref.file_id) {
      return error.WithContext(name + ": parent");  // the parent's key, not a question of which candidate
    }
    if (!error.ok()) {
      error = error.WithContext(name + ": parent");
    } else if (impl->header_.file_id != ref.file_id) {
      error = Status::Corrupt(fmt::format("{}: parent {} has file_id {}, but {}'s PARENT section expects {} (another "
                                          "checkpoint at the parent's path)",
                                          name, pname, HexFileId(impl->header_.file_id), name, HexFileId(ref.file_id)));
    } else if (std::find(chain_ids.begin(), chain_ids.end(), ref.file_id) != chain_ids.end()) {
      return Status::Corrupt(fmt::format("{}: parent {} (file_id {}) is already in the chain above it: a cycle",
                                         name, pname, HexFileId(ref.file_id)));
    } else if (impl->fingerprint_ != ref.fingerprint) {
      error = Status::Corrupt(fmt::format("{}: parent {}: index fingerprint {} differs from {} recorded in {}'s "
                                          "PARENT section (the parent was modified or replaced after {} was written)",
                                          name, pname, HexFileId(impl->fingerprint_), HexFileId(ref.fingerprint), name,
                                          name));
    } else if (impl->model_.total_pages() != ref.page_count) {
      error = Status::Corrupt(fmt::format("{}: parent {} has {} pages, the PARENT section says {}", name, pname,
                                          impl->model_.total_pages(), ref.page_count));
    } else if ((impl->model_.parent ? impl->model_.parent->chain_depth : 0) + 1 != ref.chain_depth) {
      error = Status::Corrupt(fmt::format("{}: parent {} has {} parent links below it, {}'s PARENT section says {} "
                                          "(expected one less)",
                                          name, pname, impl->model_.parent ? impl->model_.parent->chain_depth : 0, name,
                                          ref.chain_depth));
    }
    if (!error.ok()) {
      if (first_error.ok()) first_error = error;
      continue;
    }
    // This is the parent: open the rest of the chain below it. Errors there name their own files.
    HLT_RETURN_IF_ERROR(impl->OpenChain(chain_ids));
    parent_.reset(new CheckpointReader(std::move(impl)));
    return Status::Ok();
  }
  if (candidates.size() > 1) {
    std::string looked;
    for (const auto& c : candidates) looked += (looked.empty() ? "" : ", ") + c;
    return first_error.WithContext("no usable parent among " + looked);
  }
  return first_error;
}

// The block-member table (CSR over the view, in slot order), filled on first use: a chain's parents never need
// theirs when only the file opened is read through.
void CheckpointReader::Impl::FillMembers() const {
  const uint64_t total = model_.page_map.size();
  members_.resize(member_start_.back());
  std::vector<uint64_t> fill(member_start_.begin(), member_start_.end() - 1);
  for (uint64_t g = 0; g < total; ++g) {
    PageLocation loc = Locate(g);
    if (loc.kind == PageKind::kStored) members_[fill[loc.block]++] = BlockMember{uint32_t(g), loc.slot_in_block};
  }
  for (size_t b = 0; b + 1 < member_start_.size(); ++b) {
    std::sort(members_.begin() + long(member_start_[b]), members_.begin() + long(member_start_[b + 1]),
              [](const BlockMember& x, const BlockMember& y) { return x.slot < y.slot || (x.slot == y.slot && x.page < y.page); });
  }
}

// The view (section 12): block groups. This file's blocks that are groups of their own come first, in its order,
// then the groups of the parent's view it reads.
Status CheckpointReader::Impl::BuildView() {
  const uint32_t own = uint32_t(model_.blocks.size());
  // Without the key (13.7) no parent is opened: every block of the file is listed as its own, BASED ones too.
  const bool any_based = !sealed_ && std::any_of(model_.blocks.begin(), model_.blocks.end(),
                                                 [](const BlockInfo& b) { return b.based(); });
  if (any_based) {
    own_view_.assign(own, kNoBlock);
    own_slot_.assign(own, 0);
  }
  for (uint32_t b = 0; b < own; ++b) {
    if (any_based && model_.blocks[b].based()) continue;
    if (any_based) own_view_[b] = uint32_t(view_blocks_.size());
    view_blocks_.push_back(model_.blocks[b]);
    part_start_.push_back(uint32_t(parts_.size()));
    parts_.push_back(GroupPart{this, b, 0, 0, 0});
  }
  const uint64_t total = model_.page_map.size();
  std::vector<uint64_t> resolved;
  if (parent_) HLT_RETURN_IF_ERROR(AddParentGroups(&resolved));
  part_start_.push_back(uint32_t(parts_.size()));
  if (parent_) {
    // Every page once, now that this file's blocks have their places in the view.
    for (uint64_t g = 0; g < total; ++g) {
      if (model_.page_map[g] != format::kPageMapInParent) {
        resolved[g] = Pack(LocateThroughChain(g));
        continue;
      }
      PageLocation loc = Unpack(resolved[g]);
      if (loc.kind != PageKind::kStored) continue;
      loc.block = parent_to_view_[loc.block];  // its group: the parent's slots come first in it
      resolved[g] = Pack(loc);
    }
    resolved_ = std::move(resolved);
    std::vector<uint64_t>().swap(parent_->impl_->resolved_);  // the parent's own Locate goes down the chain again
  }
  BuildRestoreOrder();
  // Block -> member pages (CSR over the view, in slot order).
  member_start_.assign(view_blocks_.size() + 1, 0);
  for (uint64_t g = 0; g < total; ++g) {
    PageLocation loc = Locate(g);
    if (loc.kind == PageKind::kStored) ++member_start_[loc.block + 1];
  }
  for (size_t b = 0; b < view_blocks_.size(); ++b) member_start_[b + 1] += member_start_[b];
  BuildChainLevels();
  return Status::Ok();
}

Status CheckpointReader::Impl::AddParentGroups(std::vector<uint64_t>* resolved) {
  const uint32_t own = uint32_t(model_.blocks.size());
  const auto& pblocks = parent_->blocks();
  if (pblocks.size() >= kNoBlock / 2 || view_blocks_.size() >= kNoBlock / 2) {
    return Status::Unsupported(file_->name() + ": chain has too many blocks");
  }
  parent_to_view_.assign(pblocks.size(), kNoBlock);
  // 5.4: each BASED block's base is the group of the parent's view holding the parent's view of its base_page.
  std::vector<std::pair<uint32_t, uint32_t>> based;  // (base group, own block), in base then block order
  for (uint32_t b = 0; b < own; ++b) {
    const BlockInfo& info = model_.blocks[b];
    if (!info.based()) continue;
    const PageLocation loc = parent_->impl_->Locate(info.base_page);
    if (loc.kind != PageKind::kStored) {
      return Status::Corrupt(fmt::format("{}: BLOCKS entry {}: base_page {} is {} in the parent's view (expected a "
                                         "stored page: a BASED block is coded against the block group holding it)",
                                         BlockWhere(b), b, info.base_page, PageKindName(loc.kind)));
    }
    if (base_group_.empty()) base_group_.assign(own, kNoBlock);
    base_group_[b] = loc.block;
    based.push_back({loc.block, b});
    parent_to_view_[loc.block] = 0;  // read; numbered below
  }
  std::stable_sort(based.begin(), based.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  // IN_PARENT pages: where the parent's view has them (numbered into this view by BuildView), and the last block of
  // each group that holds one of them.
  const uint64_t total = model_.page_map.size();
  resolved->resize(total);
  std::vector<uint32_t> last_part(pblocks.size(), 0);
  for (uint64_t g = 0; g < total; ++g) {
    if (model_.page_map[g] != format::kPageMapInParent) continue;
    const PageLocation loc = parent_->impl_->Locate(g);
    (*resolved)[g] = Pack(loc);
    if (loc.kind != PageKind::kStored) continue;
    parent_to_view_[loc.block] = 0;
    const uint32_t part = uint32_t(parent_->impl_->PartIndexOfSlot(loc.block, loc.slot_in_block));
    last_part[loc.block] = std::max(last_part[loc.block], part);
  }
  size_t next_based = 0;
  for (uint32_t pb = 0; pb < pblocks.size(); ++pb) {
    if (parent_to_view_[pb] == kNoBlock) continue;
    if (view_blocks_.size() >= kNoBlock - 1) return Status::Unsupported(file_->name() + ": chain has too many blocks");
    const uint32_t v = uint32_t(view_blocks_.size());
    parent_to_view_[pb] = v;
    // Section 12: a group this file bases blocks on is read whole (it is their base); any other is read up to its
    // last block holding a page of this view (the blocks after it were bases of pages this file replaced).
    const bool is_base = next_based < based.size() && based[next_based].first == pb;
    const auto pparts = parent_->impl_->Parts(pb);
    const size_t keep = is_base ? pparts.size() : last_part[pb] + 1;
    BlockInfo info = pblocks[pb];
    info.chain_level += 1;
    info.flags &= ~format::kBlockHot;  // the working set is this file's
    info.page_count = 0;
    info.stored_length = 0;
    part_start_.push_back(uint32_t(parts_.size()));
    for (size_t i = 0; i < keep; ++i) {
      GroupPart part = pparts[i];
      const BlockInfo& b = part.owner->model_.blocks[part.block];
      part.level += 1;
      parts_.push_back(part);
      info.page_count += b.page_count;
      info.stored_length += b.stored_length;
    }
    const uint32_t base_slots = pblocks[pb].page_count;
    for (; next_based < based.size() && based[next_based].first == pb; ++next_based) {
      const uint32_t b = based[next_based].second;
      const BlockInfo& mine = model_.blocks[b];
      if (uint64_t{info.page_count} + mine.page_count > format::kMaxGroupPages) {
        return Status::Corrupt(fmt::format("{}: BASED on a block group of the parent's view that would then hold {} "
                                           "pages (at most {})",
                                           BlockWhere(b), uint64_t{info.page_count} + mine.page_count,
                                           format::kMaxGroupPages));
      }
      own_view_[b] = v;
      own_slot_[b] = info.page_count;
      parts_.push_back(GroupPart{this, b, 0, info.page_count, base_slots});
      info.page_count += mine.page_count;
      info.stored_length += mine.stored_length;
    }
    view_blocks_.push_back(info);
  }
  return Status::Ok();
}

// The restore order of the view: every file's working set before anything else, newest file first (its own hot
// blocks, then the parent's view's leading ones: that file's and its parents' working sets), then the rest in the
// same order. A child holds what changed since its parent, much of it cold (rewritten page cache, freed memory),
// and the guest's working set mostly lives on in the parents: a loader that streamed the whole child first would
// leave the parents' hot blocks to blocking faults. A BASED block is read with its group, in the parent's place.
void CheckpointReader::Impl::BuildRestoreOrder() {
  auto view_of = [&](uint32_t b) { return own_view_.empty() ? b : own_view_[b]; };
  if (!parent_) {
    view_order_ = model_.restore_order;
    for (uint32_t b : model_.restore_order) lead_blocks_ += (model_.blocks[b].flags & format::kBlockHot) ? 1 : 0;
    return;
  }
  std::vector<uint32_t> own_hot, own_rest;
  for (uint32_t b : model_.restore_order) {
    if (model_.blocks[b].based()) continue;
    (model_.blocks[b].flags & format::kBlockHot ? own_hot : own_rest).push_back(view_of(b));
  }
  view_order_ = own_hot;
  const std::vector<uint32_t>& porder = parent_->restore_order();
  const uint32_t parent_lead = parent_->impl_->lead_blocks_;
  for (uint32_t i = 0; i < parent_lead && i < porder.size(); ++i) {
    if (parent_to_view_[porder[i]] != kNoBlock) view_order_.push_back(parent_to_view_[porder[i]]);
  }
  lead_blocks_ = uint32_t(view_order_.size());
  view_order_.insert(view_order_.end(), own_rest.begin(), own_rest.end());
  for (uint32_t i = parent_lead; i < porder.size(); ++i) {
    if (parent_to_view_[porder[i]] != kNoBlock) view_order_.push_back(parent_to_view_[porder[i]]);
  }
}

// The chain as this checkpoint uses it: each file, what it stores, how it is coded, and what the view reads of it.
void CheckpointReader::Impl::BuildChainLevels() {
  ChainLevel self;
  self.name = file_->name();
  self.file_id = header_.file_id;
  self.format_minor = header_.minor;
  self.file_size = file_->size();
  self.blocks = model_.blocks.size();
  for (const auto& b : model_.blocks) {
    self.block_bytes += b.stored_length;
    self.framed_blocks += b.framed();
    self.dictionary_blocks += b.uses_dictionary();
    self.based_blocks += b.based();
  }
  self.dictionary_bytes = model_.dictionary.size();
  self.chain_depth = model_.parent ? model_.parent->chain_depth : 0;
  if (model_.parent) self.path_hint = model_.parent->path_hint;
  chain_.push_back(self);
  if (parent_) {
    for (const ChainLevel& level : parent_->chain()) {
      chain_.push_back(level);
      chain_.back().live_blocks = chain_.back().pages = 0;
    }
  }
  for (uint32_t b = 0; b < view_blocks_.size(); ++b) {
    for (const GroupPart& part : Parts(b)) ++chain_[part.level].live_blocks;
  }
  const uint64_t total = model_.page_map.size();
  for (uint64_t g = 0; g < total; ++g) {
    const PageLocation loc = Locate(g);
    if (loc.kind == PageKind::kStored) ++chain_[PartOfSlot(loc.block, loc.slot_in_block).level].pages;
  }
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
  if (header_.encrypted()) {
    HLT_RETURN_IF_ERROR(DecodeEncryptedIndex(hb, index));
  } else {
    HLT_ASSIGN_OR_RETURN(model_, format::DecodeIndex(index, footer_.index_offset, name));
  }
  HLT_RETURN_IF_ERROR(format::CheckMinorVersionCoversIndex(header_, model_, name));
  HLT_RETURN_IF_ERROR(format::CheckAuthenticatedFlag(header_, model_, name));
  HLT_RETURN_IF_ERROR(format::CheckEncryptedFlag(header_, model_, name));
  HLT_RETURN_IF_ERROR(format::CheckParentIsNotSelf(header_, model_, name));
  if (options_.mac_key) HLT_RETURN_IF_ERROR(format::CheckIndexMac(*options_.mac_key, hb, index, model_, name));
  fingerprint_ = format::ComputeIndexFingerprint(hb, index, fb);
  if (!model_.dictionary.empty()) {
    auto d = codec::Dictionary::Create(model_.dictionary, 3);
    if (!d) return d.error().WithContext(name + ": DICTIONARY section");
    dictionary_ = *d;
  }
  // Derived lookup table: slot -> block. The view (BuildView) adds the rest once the chain is open.
  uint64_t slots = model_.blocks.empty() ? 0 : model_.blocks.back().first_slot + model_.blocks.back().page_count;
  slot_block_.resize(slots);
  for (uint32_t b = 0; b < model_.blocks.size(); ++b) {
    const auto& bl = model_.blocks[b];
    std::fill_n(slot_block_.begin() + bl.first_slot, bl.page_count, b);
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> CheckpointReader::Impl::ReadBlob(uint32_t index) const {
  if (index >= model_.blobs.size()) return Status::NotFound(file_->name() + ": no blob " + std::to_string(index));
  if (sealed_) return NeedsKey();
  const BlobInfo& b = model_.blobs[index];
  std::string where = file_->name() + ": blob \"" + b.name + "\" at offset " + fmt::format("{:#x}", b.offset);
  HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, ReadBlobContent(index));
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
  HLT_ASSIGN_OR_RETURN(auto file, OpenCheckpointFile(path, options.file));
  return Open(std::move(file), std::move(options));
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(std::unique_ptr<RandomAccessFile> file,
                                                                 ReaderOptions options) {
  auto impl = std::make_unique<Impl>(std::move(file), std::move(options));
  HLT_RETURN_IF_ERROR(impl->OpenStandalone());
  HLT_RETURN_IF_ERROR(impl->OpenChain({}));
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
const std::vector<BlockInfo>& CheckpointReader::blocks() const { return impl_->view_blocks_; }
const std::vector<BlobInfo>& CheckpointReader::blobs() const { return impl_->model_.blobs; }
const std::vector<uint32_t>& CheckpointReader::restore_order() const { return impl_->view_order_; }
uint32_t CheckpointReader::working_set_blocks() const { return impl_->model_.working_set_blocks; }
size_t CheckpointReader::dictionary_size() const { return impl_->model_.dictionary.size(); }
bool CheckpointReader::authenticated() const { return impl_->model_.mac.present; }
bool CheckpointReader::encrypted() const { return impl_->header_.encrypted(); }
const KeyId& CheckpointReader::key_id() const { return impl_->header_.key_id; }
Cipher CheckpointReader::cipher() const {
  return impl_->model_.encryption.present ? static_cast<Cipher>(impl_->model_.encryption.cipher) : Cipher::kAuto;
}
bool CheckpointReader::sealed() const { return impl_->sealed_; }
const std::vector<ChainLevel>& CheckpointReader::chain() const { return impl_->chain_; }
const CheckpointReader* CheckpointReader::parent() const { return impl_->parent_.get(); }
uint32_t CheckpointReader::chain_depth() const { return impl_->chain_.front().chain_depth; }
const std::array<uint8_t, 16>& CheckpointReader::index_fingerprint() const { return impl_->fingerprint_; }
bool CheckpointReader::has_page_hashes() const { return !impl_->model_.page_hashes.empty(); }
const std::optional<CodingRecord>& CheckpointReader::coding() const { return impl_->model_.coding; }

std::optional<uint64_t> CheckpointReader::PageHash(uint64_t g) const {
  const uint32_t v = impl_->model_.page_map[g];
  if (v == format::kPageMapInParent) return impl_->parent_->PageHash(g);
  if (v < format::kPageMapFirstSlot) {
    static const uint64_t zero_hash = codec::Xxh3_128(std::vector<uint8_t>(kPageSize, 0)).low;
    return zero_hash;
  }
  if (impl_->model_.page_hashes.empty()) return std::nullopt;
  return impl_->model_.page_hashes[v - format::kPageMapFirstSlot];
}
PageLocation CheckpointReader::Locate(uint64_t g) const { return impl_->Locate(g); }

std::span<const BlockMember> CheckpointReader::BlockMembers(uint32_t block) const {
  std::call_once(impl_->members_once_, [this] { impl_->FillMembers(); });
  const auto& s = impl_->member_start_;
  return std::span<const BlockMember>(impl_->members_.data() + s[block], s[block + 1] - s[block]);
}

std::vector<GroupPart> CheckpointReader::GroupParts(uint32_t block) const {
  std::vector<GroupPart> out;
  for (const Impl::GroupPart& p : impl_->Parts(block)) {
    const BlockInfo& info = p.owner->model_.blocks[p.block];
    out.push_back(GroupPart{p.level, p.first_slot, info.page_count, info.based()});
  }
  return out;
}

Status CheckpointReader::ReadBlock(uint32_t block, std::span<uint8_t> out) const {
  return impl_->ReadBlock(block, out, nullptr);
}
Status CheckpointReader::ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread) const {
  return impl_->ReadBlock(block, out, reread);
}
Status CheckpointReader::ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread,
                                   const BlockProgress& progress, size_t first) const {
  return impl_->ReadBlock(block, out, reread, progress ? &progress : nullptr, first);
}
uint64_t CheckpointReader::blocks_reread() const {
  return impl_->blocks_reread_.load(std::memory_order_relaxed) + (impl_->parent_ ? impl_->parent_->blocks_reread() : 0);
}
Status CheckpointReader::ReadBlocks(std::span<const uint32_t> blocks, std::span<const std::span<uint8_t>> outs,
                                    std::span<Status> statuses) const {
  return impl_->ReadBlocks(blocks, outs, statuses);
}

Status CheckpointReader::ReadPage(uint64_t g, std::span<uint8_t> out) const {
  if (out.size() != kPageSize) return Status::InvalidArgument("ReadPage needs a 4096-byte buffer");
  if (impl_->sealed_) return impl_->NeedsKey();
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

Status CheckpointReader::Impl::VerifyFiles(const std::function<void(const VerifyProgress&)>& progress,
                                           VerifyProgress* p) const {
  std::vector<uint8_t> raw;
  for (uint32_t b = 0; b < model_.blocks.size(); ++b) {
    raw.resize(model_.blocks[b].raw_length());
    HLT_RETURN_IF_ERROR(ReadOwnBlockAlone(b, raw, /*use_cache=*/false));
    ++p->blocks_done;
    if (progress) progress(*p);
  }
  for (uint32_t i = 0; i < model_.blobs.size(); ++i) {
    auto r = ReadBlob(i);
    if (!r) return r.error();
  }
  if (parent_) HLT_RETURN_IF_ERROR(parent_->impl_->VerifyFiles(progress, p));
  return VerifyPageHashes();
}

// 5.11: every entry is the hash of the page its slot holds.
Status CheckpointReader::Impl::VerifyPageHashes() const {
  if (model_.page_hashes.empty()) return Status::Ok();
  std::vector<uint8_t> raw;
  for (uint32_t b = 0; b < model_.blocks.size(); ++b) {
    const BlockInfo& info = model_.blocks[b];
    raw.resize(info.raw_length());
    HLT_RETURN_IF_ERROR(ReadOwnBlockAlone(b, raw, /*use_cache=*/false));
    for (uint32_t i = 0; i < info.page_count; ++i) {
      const uint64_t slot = info.first_slot + i;
      uint64_t h = codec::Xxh3_128(std::span<const uint8_t>(raw).subspan(size_t(i) * kPageSize, kPageSize)).low;
      if (h != model_.page_hashes[slot]) {
        return Status::Corrupt(fmt::format("{}: PAGE_HASHES: slot {} (block {}): stored hash {:#x}, but its page "
                                           "hashes to {:#x}",
                                           file_->name(), slot, b, model_.page_hashes[slot], h));
      }
    }
  }
  return Status::Ok();
}

Status CheckpointReader::VerifyAll(const std::function<void(const VerifyProgress&)>& progress) const {
  VerifyProgress p;
  p.blocks_total = impl_->ChainBlockCount();
  if (impl_->sealed_) return impl_->VerifySealedFile(progress, &p);
  return impl_->VerifyFiles(progress, &p);
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
