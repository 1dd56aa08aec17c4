// CheckpointReader::Impl: the state of an open checkpoint, shared by opening and the view of its chain
// (checkpoint_reader.cc) and reading its blocks (block_reads.cc).
#ifndef HALITE_READER_READER_IMPL_H_
#define HALITE_READER_READER_IMPL_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "codec/zstd_codec.h"
#include "format/encryption_codec.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "format/integrity_checks.h"
#include "halite/block_cache.h"
#include "halite/checkpoint_reader.h"
#include "halite/format_constants.h"

namespace halite {

class HALITE_HIDDEN CheckpointReader::Impl {
 public:
  static constexpr uint32_t kNoBlock = UINT32_MAX;

  Impl(std::unique_ptr<RandomAccessFile> file, ReaderOptions options)
      : file_(std::move(file)), options_(std::move(options)) {
    if (file_->hints().remote) cache_ = options_.block_cache;
  }

  // The file on its own (sections 3-6), then its chain (section 12) and the view over both. `descendants` are the
  // file_ids of the files above this one in the chain being opened.
  Status OpenStandalone();
  Status OpenChain(const std::vector<FileId>& descendants);
  // With a key, the payload's MAC; then its checksum.
  Status VerifyPayload(uint32_t block, std::span<const uint8_t> payload) const;
  // VerifyPayload; when that fails, reads the payload from storage once more (into `payload`) and verifies
  // again. *reread is set when the second read verified.
  Status VerifyOrReread(uint32_t block, std::span<uint8_t> payload, bool* reread) const;
  // Decodes a payload whose checksum verified into `out`: decrypts it first in an encrypted file
  // (OpenSealedBlock), then decompresses it (or copies it when the block is stored raw); a BASED block against
  // `prefix`, the raw content of its base group (which must then be given, and only then). With `progress`,
  // decodes zstd block by block and reports each range of `out` that is final, the frame holding byte `first`
  // first (FRAMED blocks). An encrypted payload is opened in place (its bytes are then no longer the stored ones)
  // unless `keep_payload` (it goes into the block cache next): then a copy of it is.
  Status Decompress(uint32_t block, std::span<uint8_t> payload, bool keep_payload, std::span<uint8_t> out,
                    const BlockProgress* progress = nullptr, size_t first = 0,
                    std::span<const uint8_t> prefix = {}) const;
  // The same for a block's content (its payload as an unencrypted file stores it).
  Status DecodeContent(uint32_t block, std::span<const uint8_t> content, std::span<uint8_t> out,
                       const BlockProgress* progress, size_t first, std::span<const uint8_t> prefix) const;
  // encrypted_blocks.cc (format-spec 13.2): authenticates and decrypts a sealed payload, one unit, or a FRAMED
  // block frame by frame (the one holding byte `first` first), and decodes it. A tag that fails is kAuthFailed.
  // Each unit is decrypted in place in `payload` (no copy, no buffer of its own) and decoded from there only once
  // its tag verified; `payload` is consumed: afterwards it holds plaintext (or zeros where a tag failed).
  Status OpenSealedBlock(uint32_t block, std::span<uint8_t> payload, std::span<uint8_t> out,
                         const BlockProgress* progress, size_t first, std::span<const uint8_t> prefix) const;
  // A payload from the block cache whose checksum verified: decoded as Decompress does (and consumed: on
  // *use_storage the caller reads it from storage into the same buffer). *use_storage is set (and nothing
  // reported to `progress`) when it fails authentication before any byte was reported: an entry planted with a
  // forged checksum is never served, and storage has the block.
  Status DecodeCached(uint32_t block, std::span<uint8_t> payload, std::span<uint8_t> out,
                      const BlockProgress* progress, size_t first, std::span<const uint8_t> prefix,
                      bool* use_storage) const;
  // 13.3: a blob's content from its sealed payload.
  Result<std::vector<uint8_t>> OpenSealedBlob(uint32_t index, std::span<const uint8_t> payload) const;
  // stored_content.cc: what an unencrypted file stores for a block or blob of this file, read from storage and
  // verified (MAC, checksum, every tag) but not decompressed: hlt-save rekey re-seals it as it is. A FRAMED
  // block's frames are listed (their offsets in `bytes` and in the raw content).
  struct BlockContent {
    std::vector<uint8_t> bytes;
    std::vector<codec::FrameExtent> frames;
  };
  Result<BlockContent> ReadBlockContent(uint32_t block) const;
  Result<std::vector<uint8_t>> ReadBlobContent(uint32_t index) const;
  // 13.5 and 13.4: the index of an encrypted file, with its key (index tag, sealed sections opened) or, with
  // open_without_key, without.
  Status DecodeEncryptedIndex(std::span<const uint8_t> header_bytes, std::span<const uint8_t> index);
  // The error of a content read on a reader opened without its key.
  Status NeedsKey() const;
  Status VerifySealedFile(const std::function<void(const VerifyProgress&)>& progress, VerifyProgress* p) const;
  // A block group of the chain's view (section 12), each of its blocks from the file holding it, in order.
  Status ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread, const BlockProgress* progress = nullptr,
                   size_t first = 0) const;
  // A block of this file, in its own numbering; `use_cache` false reads storage whatever the cache holds
  // (VerifyAll: the point is to check what storage holds). `prefix` as for Decompress.
  Status ReadOwnBlock(uint32_t block, std::span<uint8_t> out, bool* reread, const BlockProgress* progress = nullptr,
                      bool use_cache = true, size_t first = 0, std::span<const uint8_t> prefix = {}) const;
  // The same for any block of this file on its own: a BASED block's base group is read from the parent first.
  Status ReadOwnBlockAlone(uint32_t block, std::span<uint8_t> out, bool use_cache) const;
  Status ReadBlocks(std::span<const uint32_t> blocks, std::span<const std::span<uint8_t>> outs,
                    std::span<Status> statuses) const;
  // block_reads.cc: the two-step reads.
  Status FetchBlocks(std::span<const uint32_t> blocks, std::vector<FetchedBlock>* out) const;
  // Fetches blocks of this file (own numbering) into out[at[i]].
  void FetchOwnBlocks(std::span<const uint32_t> own, std::span<const size_t> at, std::vector<FetchedBlock>* out) const;
  // Verifies and decodes one block of this file from a fetched payload (read from storage again when it fails
  // verification; `from_cache`: it came from the block cache, which then loses it).
  Status DecodeOwnBlock(uint32_t block, std::span<uint8_t> payload, bool from_cache, std::span<uint8_t> out,
                        bool* reread, const BlockProgress* progress, std::span<const uint8_t> prefix) const;
  // A view block group from a fetched payload (its blocks' payloads one after another).
  Status DecodeGroup(FetchedBlock& fetched, std::span<uint8_t> out, bool* reread, const BlockProgress* progress) const;
  // Reads block `block`'s payload from storage, counting it.
  Status ReadPayload(uint32_t block, std::span<uint8_t> payload) const;
  // The block cache's key for a block of this file.
  BlockCacheKey CacheKey(uint32_t block) const;
  // Puts a verified payload into the block cache (when this file uses one).
  void CacheInsert(uint32_t block, std::span<const uint8_t> payload) const;
  void AddStats(ReaderStats* stats) const;
  void AddHints(ReadHints* hints) const;
  Result<std::vector<uint8_t>> ReadBlob(uint32_t index) const;
  Status VerifyFiles(const std::function<void(const VerifyProgress&)>& progress, VerifyProgress* p) const;
  Status VerifyPageHashes() const;
  uint64_t ChainBlockCount() const { return model_.blocks.size() + (parent_ ? parent_->impl_->ChainBlockCount() : 0); }

  PageLocation Locate(uint64_t g) const {
    if (!resolved_.empty()) return Unpack(resolved_[g]);
    return LocateThroughChain(g);
  }
  // Without the resolved table: IN_PARENT pages ask the parent (and so on down the chain).
  PageLocation LocateThroughChain(uint64_t g) const {
    uint32_t v = model_.page_map[g];
    if (v == format::kPageMapAbsent) return {PageKind::kAbsent, 0, 0};
    if (v == format::kPageMapZero) return {PageKind::kZero, 0, 0};
    if (v == format::kPageMapInParent) {
      PageLocation loc = parent_->impl_->Locate(g);
      if (loc.kind == PageKind::kStored) loc.block = parent_to_view_[loc.block];
      return loc;
    }
    uint64_t slot = v - format::kPageMapFirstSlot;
    uint32_t b = slot_block_[slot];
    const uint32_t in_block = uint32_t(slot - model_.blocks[b].first_slot);
    if (own_view_.empty()) return {PageKind::kStored, b, in_block};
    return {PageKind::kStored, own_view_[b], own_slot_[b] + in_block};
  }

  std::string BlockWhere(uint32_t b) const {
    return file_->name() + ": block " + std::to_string(b) + " at offset " + fmt::format("{:#x}", model_.blocks[b].offset);
  }

  Status OpenChecked();
  Status OpenParent(const std::vector<FileId>& descendants);
  Status BuildView();
  // BuildView's part for a child: the groups of the parent's view this one reads (those holding a page of it or
  // the base of one of its BASED blocks), each extended by the BASED blocks based on it.
  Status AddParentGroups(std::vector<uint64_t>* resolved);
  void BuildRestoreOrder();
  void BuildChainLevels();

  // One block of a block group (format-spec 12): the file of the chain holding it and where its content goes.
  struct GroupPart {
    const Impl* owner = nullptr;  // the file holding the block
    uint32_t block = 0;           // its number in that file
    uint32_t level = 0;           // the file's place in this view's chain (0: this file)
    uint32_t first_slot = 0;      // its first slot within the group
    uint32_t base_slots = 0;      // BASED: its prefix is the group's first base_slots slots; 0 otherwise
  };
  std::span<const GroupPart> Parts(uint32_t view_block) const {
    return std::span<const GroupPart>(parts_).subspan(part_start_[view_block],
                                                      part_start_[view_block + 1] - part_start_[view_block]);
  }
  size_t PartIndexOfSlot(uint32_t view_block, uint32_t slot) const {
    auto parts = Parts(view_block);
    size_t i = parts.size() - 1;
    while (i > 0 && parts[i].first_slot > slot) --i;
    return i;
  }
  const GroupPart& PartOfSlot(uint32_t view_block, uint32_t slot) const {
    return Parts(view_block)[PartIndexOfSlot(view_block, slot)];
  }

  std::unique_ptr<RandomAccessFile> file_;
  ReaderOptions options_;
  format::Header header_;
  format::Footer footer_;
  format::IndexModel model_;
  format::IndexFingerprint fingerprint_{};
  std::vector<uint32_t> slot_block_;           // slot -> block
  std::shared_ptr<const codec::Dictionary> dictionary_;
  // Format-spec 13: the file key of an encrypted file opened with its key; sealed_ when opened without it.
  std::shared_ptr<const format::FileCipher> cipher_;
  bool sealed_ = false;
  mutable std::atomic<uint64_t> blocks_reread_{0};
  // The block cache, when this file is remote (ReaderOptions::block_cache), and what went through it.
  std::shared_ptr<BlockCache> cache_;
  mutable std::atomic<uint64_t> blocks_fetched_{0}, block_bytes_fetched_{0};
  mutable std::atomic<uint64_t> cache_hits_{0}, cache_misses_{0}, cache_dropped_{0}, cache_inserts_{0};
  // The backend's counters when the file was opened: read_stats() reports what came after.
  ReadCounters counters_at_open_;
  // The chain's view (section 12): block groups, this file's blocks that are groups of their own first, then the
  // parent's groups it reads, each extended by this file's BASED blocks on it.
  std::unique_ptr<CheckpointReader> parent_;
  std::vector<uint32_t> parent_to_view_;       // parent view block -> view block, kNoBlock when not read
  std::vector<GroupPart> parts_;               // every view block's parts, in content order (CSR)
  std::vector<uint32_t> part_start_;           // view block -> its first part; size view blocks + 1
  // Own block -> its view block and its first slot there; empty when the file has no BASED block (then own block b
  // is view block b, from slot 0).
  std::vector<uint32_t> own_view_, own_slot_;
  std::vector<uint32_t> base_group_;           // own BASED block -> its base, a block of the parent's view
  std::vector<BlockInfo> view_blocks_;
  std::vector<uint32_t> view_order_;
  uint32_t lead_blocks_ = 0;  // the working sets' prefix of view_order_ (every file's hot blocks)
  std::vector<uint64_t> member_start_;         // view block -> first entry in members_ (CSR), size blocks+1
  mutable std::vector<BlockMember> members_;   // FillMembers, once
  mutable std::once_flag members_once_;
  void FillMembers() const;
  std::vector<ChainLevel> chain_;
  // A chain's every page resolved to its view block and slot once, when the view is built, so that Locate costs
  // the same at any depth and building each level's view is linear (not pages x depth^2). Kept by the file opened
  // (8 bytes a page); a parent's is released once its child has its own. Empty for a full checkpoint (Locate is
  // direct there).
  std::vector<uint64_t> resolved_;
  static uint64_t Pack(PageLocation l) {
    return (uint64_t(l.kind) << 62) | (uint64_t(l.block & 0x7FFFFFFF) << 31) | (l.slot_in_block & 0x7FFFFFFF);
  }
  static PageLocation Unpack(uint64_t v) {
    return {PageKind(v >> 62), uint32_t((v >> 31) & 0x7FFFFFFF), uint32_t(v & 0x7FFFFFFF)};
  }
};

}  // namespace halite

#endif  // HALITE_READER_READER_IMPL_H_
