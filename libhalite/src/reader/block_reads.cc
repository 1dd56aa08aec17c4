// Reading blocks: a payload comes from the block cache (remote files with a cache) or from storage, is verified
// (MAC with a key, then the checksum; a payload from storage that fails is read once more, one from the cache is
// dropped and read from storage), then decoded. Whole blocks (ReadBlock), batches (ReadBlocks), and the
// two-step FetchBlocks / DecodeBlock the restore engine's loader uses.
#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "codec/hashing.h"
#include "codec/mac.h"
#include "format/integrity_checks.h"
#include "reader/reader_impl.h"

namespace halite {

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

Status CheckpointReader::Impl::ReadPayload(uint32_t block, std::span<uint8_t> payload) const {
  blocks_fetched_.fetch_add(1, std::memory_order_relaxed);
  block_bytes_fetched_.fetch_add(payload.size(), std::memory_order_relaxed);
  return file_->ReadAt(model_.blocks[block].offset, payload);
}

Status CheckpointReader::Impl::VerifyOrReread(uint32_t block, std::span<uint8_t> payload, bool* reread) const {
  Status first = VerifyPayload(block, payload);
  if (first.ok()) return first;
  // A bit flipped on the way (a bad cable, a network store, a flaky controller) is not corruption on storage:
  // read the payload once more before calling it corrupt. A second failure is what storage holds.
  Status again = ReadPayload(block, payload);
  if (!again.ok()) return again.WithContext("block " + std::to_string(block) + " (re-read after: " + first.message() + ")");
  Status second = VerifyPayload(block, payload);
  if (!second.ok()) return Status(second.code(), second.message() + ", also when read again");
  blocks_reread_.fetch_add(1, std::memory_order_relaxed);
  if (reread != nullptr) *reread = true;
  return second;
}

Status CheckpointReader::Impl::Decompress(uint32_t block, std::span<uint8_t> payload, bool keep_payload,
                                          std::span<uint8_t> out, const BlockProgress* progress, size_t first,
                                          std::span<const uint8_t> prefix) const {
  const BlockInfo& b = model_.blocks[block];
  if (b.based() == prefix.empty()) {
    return Status::Internal(BlockWhere(block) + (b.based() ? ": a BASED block read without its base group"
                                                           : ": a prefix given for a block that is not BASED"));
  }
  if (cipher_) {
    if (!keep_payload) return OpenSealedBlock(block, payload, out, progress, first, prefix);
    // The block cache gets the stored bytes after this (ciphertext only, never plaintext): open a copy.
    thread_local std::vector<uint8_t> copy;
    copy.assign(payload.begin(), payload.end());
    return OpenSealedBlock(block, copy, out, progress, first, prefix);
  }
  return DecodeContent(block, payload, out, progress, first, prefix);
}

Status CheckpointReader::Impl::DecodeContent(uint32_t block, std::span<const uint8_t> payload, std::span<uint8_t> out,
                                             const BlockProgress* progress, size_t first,
                                             std::span<const uint8_t> prefix) const {
  const BlockInfo& b = model_.blocks[block];
  if (!b.compressed()) {
    if (payload.data() != out.data()) std::memcpy(out.data(), payload.data(), out.size());
    return progress ? (*progress)(0, out.size()) : Status::Ok();
  }
  thread_local codec::Decompressor decompressor;
  const codec::FrameReference ref = b.based()              ? codec::FrameReference::Prefix(prefix)
                                    : b.uses_dictionary() ? codec::FrameReference(dictionary_.get())
                                                          : codec::FrameReference();
  Status s;
  // The caller's own errors pass through unchanged; only the decoder's are the block's corruption.
  bool caller_failed = false;
  auto report = [&](size_t begin, size_t end) {
    Status p = (*progress)(begin, end);
    caller_failed = !p.ok();
    return p;
  };
  if (b.framed()) {
    s = decompressor.DecompressFrames(payload, ref, out, first, progress ? codec::Decompressor::RangeProgress(report)
                                                                         : codec::Decompressor::RangeProgress());
  } else if (progress) {
    size_t done = 0;
    s = decompressor.DecompressExact(payload, ref, out, [&](size_t ready) {
      const size_t begin = std::exchange(done, ready);
      return ready > begin ? report(begin, ready) : Status::Ok();
    });
  } else {
    s = decompressor.DecompressExact(payload, ref, out);
  }
  if (caller_failed) return s;
  if (!s.ok()) return Status::Corrupt(BlockWhere(block) + ": " + s.message());
  return Status::Ok();
}

BlockCacheKey CheckpointReader::Impl::CacheKey(uint32_t block) const {
  const BlockInfo& b = model_.blocks[block];
  return BlockCacheKey{header_.file_id, block, b.checksum, b.stored_length};
}

void CheckpointReader::Impl::CacheInsert(uint32_t block, std::span<const uint8_t> payload) const {
  if (!cache_) return;
  // Best effort: a full or broken cache directory costs the next restore a fetch, never this one its block.
  if (cache_->Insert(CacheKey(block), payload).ok()) cache_inserts_.fetch_add(1, std::memory_order_relaxed);
}

// A group's blocks in content order: each BASED one after its base (the group's first slots), so they are decoded
// in order; the one holding byte `first` is decoded from there first (FRAMED), and each reports its ranges at
// their place in the group.
Status CheckpointReader::Impl::ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread,
                                         const BlockProgress* progress, size_t first) const {
  if (block >= view_blocks_.size()) return Status::InvalidArgument(file_->name() + ": no block " + std::to_string(block));
  if (sealed_) return NeedsKey();
  const auto parts = Parts(block);
  if (parts.size() == 1) return parts[0].owner->ReadOwnBlock(parts[0].block, out, reread, progress, true, first);
  if (out.size() != view_blocks_[block].raw_length()) {
    return Status::InvalidArgument(file_->name() + ": block " + std::to_string(block) + ": output buffer has the wrong size");
  }
  for (const GroupPart& part : parts) {
    const size_t at = size_t(part.first_slot) * format::kPageSize;
    const size_t len = part.owner->model_.blocks[part.block].raw_length();
    BlockProgress shifted;
    if (progress) shifted = [&](size_t begin, size_t end) { return (*progress)(at + begin, at + end); };
    const size_t part_first = first >= at && first < at + len ? first - at : 0;
    HLT_RETURN_IF_ERROR(part.owner->ReadOwnBlock(part.block, out.subspan(at, len), reread,
                                                 progress ? &shifted : nullptr, true, part_first,
                                                 out.first(size_t(part.base_slots) * format::kPageSize)));
  }
  return Status::Ok();
}

Status CheckpointReader::Impl::ReadOwnBlock(uint32_t block, std::span<uint8_t> out, bool* reread,
                                            const BlockProgress* progress, bool use_cache, size_t first,
                                            std::span<const uint8_t> prefix) const {
  const BlockInfo& b = model_.blocks[block];
  if (out.size() != b.raw_length()) return Status::InvalidArgument(BlockWhere(block) + ": output buffer has the wrong size");
  // A raw block of an unencrypted file is read straight into the caller's buffer, then verified.
  thread_local std::vector<uint8_t> payload_buffer;
  std::span<uint8_t> payload = out;
  if (b.compressed() || cipher_) {
    payload_buffer.resize(b.stored_length);
    payload = payload_buffer;
  }
  const bool cached = use_cache && cache_;
  if (cached) {
    if (cache_->Lookup(CacheKey(block), payload)) {
      bool use_storage = false;
      if (VerifyPayload(block, payload).ok()) {
        Status s = DecodeCached(block, payload, out, progress, first, prefix, &use_storage);
        if (!use_storage) return s;
      }
      // Torn by a crash, damaged on the cache's disk, or planted: never served; storage has the block.
      cache_->Drop(CacheKey(block));
      cache_dropped_.fetch_add(1, std::memory_order_relaxed);
    } else {
      cache_misses_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  Status s = ReadPayload(block, payload);
  if (!s.ok()) return s.WithContext("block " + std::to_string(block));
  HLT_RETURN_IF_ERROR(VerifyOrReread(block, payload, reread));
  s = Decompress(block, payload, cached, out, progress, first, prefix);
  // After decoding: a streamed fault has woken its thread by now, the cache's write does not delay it.
  if (s.ok() && cached) CacheInsert(block, payload);
  return s;
}

Status CheckpointReader::Impl::ReadOwnBlockAlone(uint32_t block, std::span<uint8_t> out, bool use_cache) const {
  if (!model_.blocks[block].based()) return ReadOwnBlock(block, out, nullptr, nullptr, use_cache);
  const uint32_t base = base_group_[block];
  std::vector<uint8_t> prefix(parent_->blocks()[base].raw_length());
  Status s = parent_->impl_->ReadBlock(base, prefix, nullptr);
  if (!s.ok()) return s.WithContext(BlockWhere(block) + ": its base group in the parent");
  return ReadOwnBlock(block, out, nullptr, nullptr, use_cache, 0, prefix);
}

// Every part of every block, one batch per file of the chain (in that file's own numbering); a group's payload is
// its parts' payloads one after another.
Status CheckpointReader::Impl::FetchBlocks(std::span<const uint32_t> blocks, std::vector<FetchedBlock>* out) const {
  if (sealed_) return NeedsKey();
  for (uint32_t b : blocks) {
    if (b >= view_blocks_.size()) return Status::InvalidArgument(file_->name() + ": no block " + std::to_string(b));
  }
  out->clear();
  out->resize(blocks.size());
  std::vector<FetchedBlock> fetched;  // one per part, of all the blocks in order
  std::vector<std::pair<const Impl*, std::pair<uint32_t, size_t>>> owned;
  for (uint32_t b : blocks) {
    for (const GroupPart& part : Parts(b)) {
      owned.push_back({part.owner, {part.block, fetched.size()}});
      fetched.emplace_back();
    }
  }
  std::stable_sort(owned.begin(), owned.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<uint32_t> own;
  std::vector<size_t> at;
  for (size_t i = 0; i < owned.size();) {
    const Impl* impl = owned[i].first;
    own.clear();
    at.clear();
    for (; i < owned.size() && owned[i].first == impl; ++i) {
      own.push_back(owned[i].second.first);
      at.push_back(owned[i].second.second);
    }
    impl->FetchOwnBlocks(own, at, &fetched);
  }
  size_t next = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    FetchedBlock& f = (*out)[i];
    const size_t n = Parts(blocks[i]).size();
    if (n == 1) {
      f = std::move(fetched[next++]);
    } else {
      // A group came from the cache only when every part did (else each part is checked as one from storage).
      f.from_cache = true;
      for (size_t k = 0; k < n; ++k, ++next) {
        FetchedBlock& part = fetched[next];
        if (f.status.ok() && !part.status.ok()) f.status = part.status;
        f.from_cache = f.from_cache && part.from_cache;
        f.payload.insert(f.payload.end(), part.payload.begin(), part.payload.end());
      }
    }
    f.block = blocks[i];
  }
  for (const FetchedBlock& f : *out) {
    if (!f.status.ok()) return f.status;
  }
  return Status::Ok();
}

void CheckpointReader::Impl::FetchOwnBlocks(std::span<const uint32_t> own, std::span<const size_t> at,
                                            std::vector<FetchedBlock>* out) const {
  std::vector<ReadRequest> reqs;
  std::vector<size_t> req_at;
  for (size_t i = 0; i < own.size(); ++i) {
    FetchedBlock& f = (*out)[at[i]];
    const BlockInfo& b = model_.blocks[own[i]];
    f.payload.resize(b.stored_length);
    if (cache_) {
      if (cache_->Lookup(CacheKey(own[i]), f.payload)) {
        f.from_cache = true;  // verified by DecodeBlock like any payload
        continue;
      }
      cache_misses_.fetch_add(1, std::memory_order_relaxed);
    }
    reqs.push_back(ReadRequest{b.offset, f.payload, {}});
    req_at.push_back(i);
    blocks_fetched_.fetch_add(1, std::memory_order_relaxed);
    block_bytes_fetched_.fetch_add(b.stored_length, std::memory_order_relaxed);
  }
  if (reqs.empty()) return;
  (void)file_->ReadBatch(reqs);
  for (size_t j = 0; j < reqs.size(); ++j) {
    if (!reqs[j].status.ok()) (*out)[at[req_at[j]]].status = reqs[j].status.WithContext("block " + std::to_string(own[req_at[j]]));
  }
}

Status CheckpointReader::Impl::DecodeOwnBlock(uint32_t block, std::span<uint8_t> payload, bool from_cache,
                                              std::span<uint8_t> out, bool* reread, const BlockProgress* progress,
                                              std::span<const uint8_t> prefix) const {
  const BlockInfo& b = model_.blocks[block];
  if (out.size() != b.raw_length()) return Status::InvalidArgument(BlockWhere(block) + ": output buffer has the wrong size");
  if (payload.size() != b.stored_length) {
    return Status::InvalidArgument(BlockWhere(block) + ": fetched payload has the wrong size");
  }
  if (from_cache) {
    if (VerifyPayload(block, payload).ok()) {
      bool use_storage = false;
      Status s = DecodeCached(block, payload, out, progress, 0, prefix, &use_storage);
      if (!use_storage) return s;
    }
    cache_->Drop(CacheKey(block));
    cache_dropped_.fetch_add(1, std::memory_order_relaxed);
    Status s = ReadPayload(block, payload);
    if (!s.ok()) return s.WithContext("block " + std::to_string(block));
  }
  HLT_RETURN_IF_ERROR(VerifyOrReread(block, payload, reread));
  Status s = Decompress(block, payload, cache_ != nullptr, out, progress, 0, prefix);
  if (s.ok()) CacheInsert(block, payload);
  return s;
}

Status CheckpointReader::Impl::DecodeGroup(FetchedBlock& fetched, std::span<uint8_t> out, bool* reread,
                                           const BlockProgress* progress) const {
  if (fetched.block >= view_blocks_.size()) {
    return Status::InvalidArgument(file_->name() + ": no block " + std::to_string(fetched.block));
  }
  if (out.size() != view_blocks_[fetched.block].raw_length()) {
    return Status::InvalidArgument(file_->name() + ": block " + std::to_string(fetched.block) +
                                   ": output buffer has the wrong size");
  }
  if (fetched.payload.size() != view_blocks_[fetched.block].stored_length) {
    return Status::InvalidArgument(file_->name() + ": block " + std::to_string(fetched.block) +
                                   ": fetched payload has the wrong size");
  }
  size_t payload_at = 0;
  for (const GroupPart& part : Parts(fetched.block)) {
    const BlockInfo& info = part.owner->model_.blocks[part.block];
    const size_t at = size_t(part.first_slot) * format::kPageSize;
    BlockProgress shifted;
    if (progress) shifted = [&](size_t begin, size_t end) { return (*progress)(at + begin, at + end); };
    HLT_RETURN_IF_ERROR(part.owner->DecodeOwnBlock(
        part.block, std::span<uint8_t>(fetched.payload).subspan(payload_at, info.stored_length), fetched.from_cache,
        out.subspan(at, info.raw_length()), reread, progress ? &shifted : nullptr,
        out.first(size_t(part.base_slots) * format::kPageSize)));
    payload_at += info.stored_length;
  }
  return Status::Ok();
}

Status CheckpointReader::Impl::ReadBlocks(std::span<const uint32_t> blocks, std::span<const std::span<uint8_t>> outs,
                                          std::span<Status> statuses) const {
  if (blocks.size() != outs.size() || blocks.size() != statuses.size()) {
    return Status::InvalidArgument("ReadBlocks: blocks, outs and statuses differ in length");
  }
  if (sealed_) return NeedsKey();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i] >= view_blocks_.size()) {
      return Status::InvalidArgument(file_->name() + ": no block " + std::to_string(blocks[i]));
    }
    if (outs[i].size() != view_blocks_[blocks[i]].raw_length()) {
      return Status::InvalidArgument(file_->name() + ": block " + std::to_string(blocks[i]) +
                                     ": output buffer has the wrong size");
    }
  }
  std::vector<FetchedBlock> fetched;
  Status f = FetchBlocks(blocks, &fetched);
  if (fetched.size() != blocks.size()) return f;  // refused before reading anything
  Status first;
  for (size_t i = 0; i < blocks.size(); ++i) {
    statuses[i] = fetched[i].status.ok() ? DecodeGroup(fetched[i], outs[i], nullptr, nullptr) : fetched[i].status;
    if (!statuses[i].ok() && first.ok()) first = statuses[i];
  }
  return first;
}

void CheckpointReader::Impl::AddStats(ReaderStats* st) const {
  const ReadCounters now = file_->counters();
  st->storage_requests += now.requests - counters_at_open_.requests;
  st->storage_bytes += now.bytes - counters_at_open_.bytes;
  st->blocks_fetched += blocks_fetched_.load(std::memory_order_relaxed);
  st->block_bytes_fetched += block_bytes_fetched_.load(std::memory_order_relaxed);
  st->cache_hits += cache_hits_.load(std::memory_order_relaxed);
  st->cache_misses += cache_misses_.load(std::memory_order_relaxed);
  st->cache_dropped += cache_dropped_.load(std::memory_order_relaxed);
  st->cache_inserts += cache_inserts_.load(std::memory_order_relaxed);
  if (parent_) parent_->impl_->AddStats(st);
}

void CheckpointReader::Impl::AddHints(ReadHints* hints) const {
  const ReadHints mine = file_->hints();
  hints->batch_bytes = std::max(hints->batch_bytes, mine.batch_bytes);
  hints->remote = hints->remote || mine.remote;
  if (parent_) parent_->impl_->AddHints(hints);
}

// --- public shell (the rest is in checkpoint_reader.cc) ---

Status CheckpointReader::FetchBlocks(std::span<const uint32_t> blocks, std::vector<FetchedBlock>* out) const {
  return impl_->FetchBlocks(blocks, out);
}

Status CheckpointReader::DecodeBlock(FetchedBlock& fetched, std::span<uint8_t> out, bool* reread,
                                     const BlockProgress& progress) const {
  if (!fetched.status.ok()) return fetched.status;
  if (impl_->sealed_) return impl_->NeedsKey();
  return impl_->DecodeGroup(fetched, out, reread, progress ? &progress : nullptr);
}

ReadHints CheckpointReader::read_hints() const {
  ReadHints h;
  impl_->AddHints(&h);
  return h;
}

ReaderStats CheckpointReader::read_stats() const {
  ReaderStats st;
  impl_->AddStats(&st);
  return st;
}

}  // namespace halite
