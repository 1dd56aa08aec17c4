// Fuzz target: a whole checkpoint from memory, opened and read the way a restorer reads it.
//
// The input is a checkpoint file. It is opened three ways: as given; with every checksum recomputed (so
// mutations reach the rules behind the checksums); and, when the header says it is authenticated, with the
// test-vector key. An encrypted one (format-spec 13) also with the encrypted vectors' keys, without a key (what
// can be read sealed), and resealed with each key (index tag recomputed) so mutations reach past the tags. For each reader that opens: the lookup tables are consistent, every block and blob either
// reads back or fails with kCorrupt (kAuthFailed with a key), single-page reads agree with whole-block reads,
// and batched reads agree with single reads. Memory never fails here, so kIoError is a bug.
//
// Chains (format-spec 12): an input in the chain format of chain_input.h is a checkpoint and the parents served to
// it, so the PARENT section, IN_PARENT entries, PAGE_HASHES and the chain checks (file_id, fingerprint, depth,
// cycles) run on fuzzed bytes; the view's invariants are checked as for one file, and its block groups (since 1.4:
// a child's blocks coded against the parent, BASED, read with their base) fill their slots in order. A parent asked
// for beyond the input is refused by the resolver (kCorrupt).
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "support/checksum_reseal.h"
#include "chain_input.h"
#include "fuzz_input.h"
#include "halite/authentication.h"
#include "halite/checkpoint_reader.h"
#include "halite/encryption.h"
#include "halite/format_constants.h"

namespace {

using namespace halite;

constexpr uint64_t kDecodeBudget = 64ull << 20;  // raw bytes decoded per reader, so one input stays fast
constexpr uint64_t kMaxBlobRead = 64ull << 20;

bool ExpectedFailure(const Status& s, bool keyed) {
  return s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported ||
         (keyed && s.code() == StatusCode::kAuthFailed);
}

void CheckReader(const CheckpointReader& rd, bool keyed) {
  const auto& regions = rd.regions();
  const auto& blocks = rd.blocks();
  FUZZ_CHECK(!regions.empty());
  uint64_t total = 0;
  for (uint32_t i = 0; i < regions.size(); ++i) {
    FUZZ_CHECK(regions[i].first_page == total);
    FUZZ_CHECK(regions[i].page_count() > 0);
    total += regions[i].page_count();
    FUZZ_CHECK(rd.PageOf(regions[i].first_page) == (PageRef{i, 0}));
    FUZZ_CHECK(rd.PageOf(total - 1) == (PageRef{i, regions[i].page_count() - 1}));
    FUZZ_CHECK(rd.GlobalPage(PageRef{i, 0}) == regions[i].first_page);
    auto found = rd.FindRegion(regions[i].name);
    FUZZ_CHECK(found.has_value() && *found == i);
  }
  FUZZ_CHECK(total == rd.total_pages());
  FUZZ_CHECK(total <= format::kMaxTotalPages);

  // Restore order: a permutation with the HOT blocks first.
  const auto& order = rd.restore_order();
  FUZZ_CHECK(order.size() == blocks.size());
  FUZZ_CHECK(rd.working_set_blocks() <= order.size());
  std::vector<bool> seen(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) {
    FUZZ_CHECK(order[i] < blocks.size() && !seen[order[i]]);
    seen[order[i]] = true;
    FUZZ_CHECK(blocks[order[i]].hot() == (i < rd.working_set_blocks()));
  }

  // Page lookup agrees with the block member lists, and every slot of every block of this file is used (a parent's
  // block in the view holds only the pages this checkpoint still takes from it, at least one).
  uint64_t stored_refs = 0;
  for (uint64_t g = 0; g < total; ++g) {
    PageLocation loc = rd.Locate(g);
    if (loc.kind != PageKind::kStored) continue;
    ++stored_refs;
    FUZZ_CHECK(loc.block < blocks.size());
    FUZZ_CHECK(loc.slot_in_block < blocks[loc.block].page_count);
  }
  uint64_t members = 0;
  for (uint32_t b = 0; b < blocks.size(); ++b) {
    FUZZ_CHECK(blocks[b].page_count >= 1 && blocks[b].page_count <= format::kMaxBlockPages);
    auto ms = rd.BlockMembers(b);
    members += ms.size();
    std::vector<bool> used(blocks[b].page_count);
    for (size_t i = 0; i < ms.size(); ++i) {
      FUZZ_CHECK(ms[i].slot < blocks[b].page_count);
      FUZZ_CHECK(i == 0 || ms[i - 1].slot <= ms[i].slot);
      PageLocation loc = rd.Locate(ms[i].page);
      FUZZ_CHECK(loc.kind == PageKind::kStored && loc.block == b && loc.slot_in_block == ms[i].slot);
      used[ms[i].slot] = true;
    }
    if (blocks[b].chain_level == 0) {
      FUZZ_CHECK(std::all_of(used.begin(), used.end(), [](bool u) { return u; }));
    } else {
      FUZZ_CHECK(!ms.empty());
      FUZZ_CHECK(!blocks[b].hot());
      FUZZ_CHECK(blocks[b].chain_level < rd.chain().size());
    }
  }
  FUZZ_CHECK(members == stored_refs);
  // The chain: one level per file, each level's pages and live blocks adding up to the view's.
  const auto& chain = rd.chain();
  FUZZ_CHECK(!chain.empty() && chain.size() <= format::kMaxChainDepth + 1);
  FUZZ_CHECK((rd.parent() != nullptr) == (chain.size() > 1));
  FUZZ_CHECK(rd.chain_depth() + 1 == chain.size());
  uint64_t level_pages = 0, level_blocks = 0;
  for (const auto& level : chain) {
    level_pages += level.pages;
    level_blocks += level.live_blocks;
  }
  FUZZ_CHECK(level_pages == stored_refs);
  // Block groups (since 1.4): their blocks fill their slots in order, the first never BASED, and every block of
  // every group is one a level counts as read.
  uint64_t parts = 0;
  for (uint32_t b = 0; b < blocks.size(); ++b) {
    const auto group = rd.GroupParts(b);
    FUZZ_CHECK(!group.empty() && !group.front().based);
    uint32_t slots = 0;
    for (const GroupPart& part : group) {
      FUZZ_CHECK(part.first_slot == slots && part.chain_level < chain.size());
      slots += part.page_count;
    }
    FUZZ_CHECK(slots == blocks[b].page_count);
    parts += group.size();
  }
  FUZZ_CHECK(level_blocks == parts);
  for (uint64_t g = 0; g < total && g < 64; ++g) {
    auto h = rd.PageHash(g);
    if (rd.Locate(g).kind != PageKind::kStored) FUZZ_CHECK(h.has_value());
  }

  // Reads: out-of-range requests are refused, absent and zero pages read as zeros.
  std::vector<uint8_t> page(format::kPageSize), other(format::kPageSize);
  FUZZ_CHECK(rd.ReadPage(total, page).code() == StatusCode::kInvalidArgument);
  FUZZ_CHECK(rd.ReadBlob(uint32_t(rd.blobs().size())).error().code() == StatusCode::kNotFound);
  for (uint64_t g = 0, tried = 0; g < total && tried < 4; ++g) {
    if (rd.Locate(g).kind == PageKind::kStored) continue;
    ++tried;
    std::fill(page.begin(), page.end(), 0xAA);
    FUZZ_CHECK(rd.ReadPage(g, page).ok());
    FUZZ_CHECK(std::all_of(page.begin(), page.end(), [](uint8_t v) { return v == 0; }));
  }

  // Blocks, within a budget: whole-block reads, page reads from them, and one batch of all of them.
  uint64_t budget = kDecodeBudget;
  std::vector<uint32_t> batch;
  std::vector<std::vector<uint8_t>> single;
  std::vector<Status> single_status;
  for (uint32_t b = 0; b < blocks.size() && blocks[b].raw_length() <= budget; ++b) {
    budget -= blocks[b].raw_length();
    std::vector<uint8_t> raw(blocks[b].raw_length());
    Status s = rd.ReadBlock(b, raw);
    FUZZ_CHECK_MSG(s.ok() || ExpectedFailure(s, keyed), s.ToString());
    if (s.ok()) {
      auto ms = rd.BlockMembers(b);
      for (size_t i : {size_t(0), ms.size() - 1}) {
        if (ms.empty()) break;
        Status ps = rd.ReadPage(ms[i].page, page);
        FUZZ_CHECK_MSG(ps.ok(), ps.ToString());
        FUZZ_CHECK(std::memcmp(page.data(), raw.data() + size_t(ms[i].slot) * format::kPageSize, page.size()) == 0);
      }
    }
    batch.push_back(b);
    single.push_back(std::move(raw));
    single_status.push_back(s);
  }
  if (!batch.empty()) {
    std::vector<std::vector<uint8_t>> outs(batch.size());
    std::vector<std::span<uint8_t>> spans;
    for (size_t i = 0; i < batch.size(); ++i) {
      outs[i].resize(blocks[batch[i]].raw_length());
      spans.push_back(outs[i]);
    }
    std::vector<Status> statuses(batch.size());
    (void)rd.ReadBlocks(batch, spans, statuses);
    for (size_t i = 0; i < batch.size(); ++i) {
      FUZZ_CHECK_MSG(statuses[i].code() == single_status[i].code(), statuses[i].ToString());
      if (statuses[i].ok()) FUZZ_CHECK(outs[i] == single[i]);
    }
  }
  // The whole file, when it fits the budget: VerifyAll fails exactly when some block or blob does.
  bool small_blobs = std::all_of(rd.blobs().begin(), rd.blobs().end(),
                                 [](const BlobInfo& b) { return b.raw_length <= kMaxBlobRead; });
  if (batch.size() == blocks.size() && small_blobs) {
    Status v = rd.VerifyAll();
    FUZZ_CHECK_MSG(v.ok() || ExpectedFailure(v, keyed), v.ToString());
    for (const Status& s : single_status) {
      if (!s.ok()) FUZZ_CHECK(!v.ok());
    }
  }

  // Blobs: by index and by name, the same bytes of the declared length.
  for (uint32_t i = 0; i < rd.blobs().size(); ++i) {
    const BlobInfo& info = rd.blobs()[i];
    if (info.raw_length > kMaxBlobRead) continue;
    auto blob = rd.ReadBlob(i);
    if (!blob) {
      FUZZ_CHECK_MSG(ExpectedFailure(blob.error(), keyed), blob.error().ToString());
      continue;
    }
    FUZZ_CHECK(blob->size() == info.raw_length);
    auto by_name = rd.ReadBlob(info.name);
    FUZZ_CHECK(by_name.has_value() && *by_name == *blob);
  }
}

// Format-spec 13.7: a reader opened without its key shows the structure and refuses every content read.
void CheckSealedReader(const CheckpointReader& rd) {
  FUZZ_CHECK(rd.encrypted());
  FUZZ_CHECK(rd.total_pages() == 0);
  FUZZ_CHECK(!rd.regions().empty());
  FUZZ_CHECK(rd.restore_order().size() == rd.blocks().size());
  std::vector<uint8_t> page(format::kPageSize);
  FUZZ_CHECK(rd.ReadPage(0, page).code() == StatusCode::kAuthFailed);
  if (!rd.blocks().empty() && rd.blocks()[0].raw_length() <= kDecodeBudget) {
    std::vector<uint8_t> raw(rd.blocks()[0].raw_length());
    FUZZ_CHECK(rd.ReadBlock(0, raw).code() == StatusCode::kAuthFailed);
  }
  if (!rd.blobs().empty()) FUZZ_CHECK(rd.ReadBlob(0).error().code() == StatusCode::kAuthFailed);
  uint64_t payload = 0;
  for (const auto& b : rd.blocks()) payload += b.stored_length;
  if (payload <= kDecodeBudget) {
    Status v = rd.VerifyAll();  // checksums only
    FUZZ_CHECK_MSG(v.ok() || v.code() == StatusCode::kCorrupt, v.ToString());
  }
}

// The keys of the encrypted test vectors (tests/vectors/encrypted_vectors.h): A is bytes 0x40..0x5f, B 0x60..0x7f.
EncryptionKey VectorKey(uint8_t first) {
  EncryptionKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(first + i);
  return k;
}

std::shared_ptr<Keyring> VectorKeys() {
  auto ring = std::make_shared<Keyring>();
  (void)ring->Add(VectorKey(0x40));
  (void)ring->Add(VectorKey(0x60));
  return ring;
}

struct Keys {
  std::optional<MacKey> mac;
  std::shared_ptr<Keyring> keyring;
  bool without_key = false;
};

void OpenAndRead(std::vector<uint8_t> bytes, const Keys& keys, const std::vector<std::vector<uint8_t>>& parents = {}) {
  ReaderOptions options;
  options.mac_key = keys.mac;
  options.keyring = keys.keyring;
  options.open_without_key = keys.without_key;
  size_t served = 0;
  options.open_parent = [&](const std::string& path) -> Result<std::unique_ptr<RandomAccessFile>> {
    if (served >= parents.size()) return Status::Corrupt(path + ": no such parent in this fuzz input");
    return NewMemoryFile(path, parents[served++]);
  };
  // An encrypted file (or parent) whose key is not given is refused with kAuthFailed, as is any tag that fails.
  const bool encrypted = bytes.size() >= 64 && (halite::LoadLe32(&bytes[36]) & format::kHeaderEncrypted);
  const bool auth_possible = keys.mac.has_value() || keys.keyring != nullptr || encrypted || !parents.empty();
  auto reader = CheckpointReader::Open(NewMemoryFile("fuzz.hlt", std::move(bytes)), options);
  if (!reader) {
    FUZZ_CHECK_MSG(ExpectedFailure(reader.error(), auth_possible), reader.error().ToString());
    return;
  }
  if (keys.mac) FUZZ_CHECK((*reader)->authenticated());
  if ((*reader)->sealed()) {
    FUZZ_CHECK(keys.without_key);
    CheckSealedReader(**reader);
    return;
  }
  CheckReader(**reader, auth_possible);
}

// The key of the authenticated test vector and of the generated authenticated seeds: bytes 0x00..0x1f.
MacKey FuzzKey() {
  MacKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(i);
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Keys vector_keys{std::nullopt, VectorKeys(), false};
  if (auto files = halite::fuzzing::DecodeChainInput(data, size)) {
    std::vector<std::vector<uint8_t>> parents(files->begin() + 1, files->end());
    OpenAndRead((*files)[0], vector_keys, parents);
    // Resealed, every file's own checks pass, so the chain rules (fingerprints, depths, references) decide.
    for (auto& f : *files) halite::testing::ResealAllChecksums(f);
    std::vector<std::vector<uint8_t>> resealed_parents(files->begin() + 1, files->end());
    OpenAndRead((*files)[0], vector_keys, resealed_parents);
    return 0;
  }
  std::vector<uint8_t> bytes(data, data + size);
  OpenAndRead(bytes, Keys{});
  std::vector<uint8_t> fixed = bytes;
  halite::testing::ResealAllChecksums(fixed);
  if (fixed != bytes) OpenAndRead(fixed, Keys{});
  const uint32_t flags = size >= 64 ? halite::LoadLe32(data + 36) : 0;
  if (flags & halite::format::kHeaderAuthenticated) OpenAndRead(bytes, Keys{FuzzKey(), nullptr, false});
  if (flags & halite::format::kHeaderEncrypted) {
    // Format-spec 13: with the keys as given; without them (structure and checksums); and resealed by the holder
    // of each key, so that mutations behind the index tag reach the sealed sections, frame tables and unit tags.
    OpenAndRead(bytes, vector_keys);
    OpenAndRead(bytes, Keys{std::nullopt, nullptr, true});
    for (uint8_t first : {uint8_t(0x40), uint8_t(0x60)}) {
      std::vector<uint8_t> resealed = bytes;
      halite::testing::ResealWithKey(resealed, VectorKey(first));
      if (resealed != bytes) OpenAndRead(std::move(resealed), vector_keys);
    }
  }
  return 0;
}
