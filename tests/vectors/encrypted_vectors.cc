#include "vectors/encrypted_vectors.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include <fmt/format.h>

#include "halite/bytes.h"
#include "format/encryption_codec.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/checkpoint_writer.h"
#include "support/checksum_reseal.h"
#include "support/synthetic_memory.h"

namespace halite::vectors {
namespace {

constexpr size_t kPage = 4096;

FileId EncryptedFileId(uint8_t n) {
  return FileId{0x48, 0x4c, 0x54, 0x2d, 0x65, 0x6e, 0x63, 0x72, 0x79, 0x70, 0x74, 0x65, 0x64, 0x2d, 0x30, n};
}

EncryptionKey KeyFrom(uint8_t first) {
  EncryptionKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(first + i);
  return k;
}

WriterOptions Options(uint8_t file, Cipher cipher, const EncryptionKey& key) {
  WriterOptions o;
  o.file_id = EncryptedFileId(file);
  o.deterministic = true;  // a chosen file_id with a key: test vectors only
  o.threads = 2;
  o.sink.use_io_uring = false;
  o.metadata.creator = "libhalite test vectors";
  o.encryption_key = key;
  o.cipher = cipher;
  return o;
}

// 64 pages of text and code (8-page blocks of two 4-page frames, with a dictionary), 32 random pages (raw
// blocks of equal length among them), a zero page, a duplicate; a working set; two blobs.
Status FillEncrypted(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("pc.ram", 0, 98 * kPage));
  testing::SyntheticMemory mem(41);
  std::vector<uint8_t> buf(kPage);
  std::vector<uint8_t> fifth;
  for (uint64_t p = 0; p < 64; ++p) {
    mem.MakePage(p % 3 ? testing::PageFlavor::kText : testing::PageFlavor::kCode, buf.data());
    buf[0] = uint8_t(p);  // no duplicates among them
    if (p == 5) fifth = buf;
    HLT_RETURN_IF_ERROR(w.PutPage(r, p, buf));
  }
  std::mt19937_64 rng(41);  // incompressible: stored raw whatever the coding chosen
  for (uint64_t p = 64; p < 96; ++p) {
    for (size_t i = 0; i < kPage; i += 8) {
      const uint64_t v = rng();
      std::memcpy(buf.data() + i, &v, 8);
    }
    HLT_RETURN_IF_ERROR(w.PutPage(r, p, buf));
  }
  HLT_RETURN_IF_ERROR(w.PutZeroPages(r, 96, 1));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 97, fifth));  // a duplicate: stored once (the sealed PAGE_MAP hides that)
  std::vector<PageRun> access = {{{r, 16}, 4, 0}, {{r, 40}, 2, 0}};
  HLT_RETURN_IF_ERROR(w.AddAccessedPages(access));
  std::string state;
  for (int i = 0; i < 20; ++i) state += "QEVM device state: serial, pit, rtc, i440fx, virtio-net ... ";
  HLT_RETURN_IF_ERROR(w.AddBlob("qemu.device-state", std::span(reinterpret_cast<const uint8_t*>(state.data()), state.size())));
  const uint8_t tiny[] = {1, 2, 3};
  return w.AddBlob("tiny", tiny);
}

Status FillChainBase(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 8 * kPage));
  testing::SyntheticMemory mem(43);
  std::vector<uint8_t> buf(kPage);
  for (uint64_t p = 0; p < 8; ++p) {
    mem.MakePage(p % 2 ? testing::PageFlavor::kText : testing::PageFlavor::kPointers, buf.data());
    HLT_RETURN_IF_ERROR(w.PutPage(r, p, buf));
  }
  const uint8_t state[] = {'b', 'a', 's', 'e'};
  return w.AddBlob("state", state);
}

// The base's pages with 2 and 5 changed.
Status FillChainChild(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 8 * kPage));
  testing::SyntheticMemory mem(43);
  std::vector<uint8_t> buf(kPage);
  for (uint64_t p = 0; p < 8; ++p) {
    mem.MakePage(p % 2 ? testing::PageFlavor::kText : testing::PageFlavor::kPointers, buf.data());
    if (p == 2 || p == 5) std::memset(buf.data(), 0x77, 64);
    HLT_RETURN_IF_ERROR(w.PutPage(r, p, buf));
  }
  const uint8_t state[] = {'c', 'h', 'i', 'l', 'd'};
  return w.AddBlob("state", state);
}

Result<std::vector<uint8_t>> Build(WriterOptions o, const std::function<Status(CheckpointWriter&)>& fill) {
  std::vector<uint8_t> bytes;
  HLT_ASSIGN_OR_RETURN(auto w, CheckpointWriter::Create(NewMemorySink("vector", &bytes), std::move(o)));
  HLT_RETURN_IF_ERROR(fill(*w));
  HLT_ASSIGN_OR_RETURN(auto summary, w->Finish());
  (void)summary;
  return bytes;
}

struct IndexBytes {
  uint64_t offset = 0;
  std::vector<uint8_t> bytes;
};

IndexBytes IndexOf(const std::vector<uint8_t>& f) {
  IndexBytes i;
  i.offset = halite::LoadLe64(&f[f.size() - 64]);
  const uint64_t length = halite::LoadLe64(&f[f.size() - 56]);
  i.bytes.assign(f.begin() + long(i.offset), f.begin() + long(i.offset + length));
  return i;
}

FileId FileIdOf(const std::vector<uint8_t>& f) {
  FileId id;
  std::memcpy(id.data(), &f[16], id.size());
  return id;
}

// The index as the key's holder reads it (sealed sections opened), to change a rule behind the index tag.
Result<format::IndexModel> KeyedModel(const std::vector<uint8_t>& f, const EncryptionKey& key) {
  IndexBytes idx = IndexOf(f);
  HLT_ASSIGN_OR_RETURN(auto view, format::FindEncryptionSection(idx.bytes, idx.offset, "vector"));
  HLT_ASSIGN_OR_RETURN(auto cipher, format::FileCipher::Derive(key, FileIdOf(f), view.cipher));
  const format::SectionUnsealer unseal = [&](uint32_t type, uint32_t flags,
                                             std::span<const uint8_t> body) -> Result<std::vector<uint8_t>> {
    std::vector<uint8_t> plain(body.size() - 16);
    if (!cipher->Open(format::SectionUnitAd(type, flags, body.size()), body, plain)) return Status::AuthFailed("tag");
    return plain;
  };
  return format::DecodeIndex(idx.bytes, idx.offset, "vector", &unseal);
}

// `f` with its index encoded from a keyed model, sealed (or not) with `key`, and resealed by the key's holder.
Result<std::vector<uint8_t>> WithKeyedModel(const std::vector<uint8_t>& f, const format::IndexModel& m,
                                            const EncryptionKey& key, bool seal = true) {
  HLT_ASSIGN_OR_RETURN(auto cipher, format::FileCipher::Derive(key, FileIdOf(f), m.encryption.cipher));
  const format::SectionSealer sealer = [&](uint32_t type, uint32_t flags, std::span<const uint8_t> plain) {
    std::vector<uint8_t> out(plain.size() + 16);
    cipher->Seal(format::SectionUnitAd(type, flags, out.size()), plain, out);
    return out;
  };
  std::vector<uint8_t> index = format::EncodeIndex(m, seal ? &sealer : nullptr);
  auto section = format::EncodeEncryptionSection(m.encryption.cipher, format::IndexTag{});
  index.insert(index.end(), section.begin(), section.end());
  std::vector<uint8_t> out = testing::ResealWithIndex(f, index);
  testing::ResealWithKey(out, key);
  return out;
}

// `f` with its payloads changed by `edit` (lengths may change: offsets follow) and everything resealed with `key`.
using PayloadEdit = std::function<void(format::IndexModel&, std::vector<std::vector<uint8_t>>& blocks,
                                       std::vector<std::vector<uint8_t>>& blobs)>;
Result<std::vector<uint8_t>> WithPayloads(const std::vector<uint8_t>& f, const EncryptionKey& key,
                                          const PayloadEdit& edit) {
  IndexBytes idx = IndexOf(f);
  HLT_ASSIGN_OR_RETURN(format::IndexModel m, format::DecodeIndex(idx.bytes, idx.offset, "vector"));
  std::vector<std::vector<uint8_t>> blocks, blobs;
  for (const auto& b : m.blocks) blocks.emplace_back(f.begin() + long(b.offset), f.begin() + long(b.offset + b.stored_length));
  for (const auto& b : m.blobs) blobs.emplace_back(f.begin() + long(b.offset), f.begin() + long(b.offset + b.stored_length));
  edit(m, blocks, blobs);
  std::vector<uint8_t> out(f.begin(), f.begin() + format::kHeaderSize);
  for (size_t i = 0; i < blocks.size(); ++i) {
    m.blocks[i].offset = out.size();
    m.blocks[i].stored_length = uint32_t(blocks[i].size());
    out.insert(out.end(), blocks[i].begin(), blocks[i].end());
  }
  for (size_t i = 0; i < blobs.size(); ++i) {
    m.blobs[i].offset = out.size();
    m.blobs[i].stored_length = blobs[i].size();
    out.insert(out.end(), blobs[i].begin(), blobs[i].end());
  }
  format::Footer footer;
  footer.index_offset = out.size();
  footer.file_id = FileIdOf(f);
  std::vector<uint8_t> index = format::EncodeIndex(m);  // the sealed sections as they were
  auto section = format::EncodeEncryptionSection(m.encryption.cipher, m.encryption.index_tag);
  index.insert(index.end(), section.begin(), section.end());
  out.insert(out.end(), index.begin(), index.end());
  footer.index_length = index.size();
  footer.file_size = out.size() + format::kFooterSize;
  auto fb = format::EncodeFooter(footer);
  out.insert(out.end(), fb.begin(), fb.end());
  testing::ResealWithKey(out, key);
  return out;
}

std::vector<uint8_t> WithHeader(std::vector<uint8_t> f, const std::function<void(format::Header&)>& edit) {
  format::Header h;
  h.major = halite::LoadLe16(&f[8]);
  h.minor = halite::LoadLe16(&f[10]);
  h.file_id = FileIdOf(f);
  h.flags = halite::LoadLe32(&f[36]);
  std::memcpy(h.key_id.data(), &f[40], 16);
  edit(h);
  auto hb = format::EncodeHeader(h);
  std::copy(hb.begin(), hb.end(), f.begin());
  return f;
}

// The first block with `flags` set and the first without any of `without`.
uint32_t FirstBlock(const format::IndexModel& m, uint32_t flags, uint32_t without = 0) {
  for (uint32_t b = 0; b < m.blocks.size(); ++b) {
    if ((m.blocks[b].flags & flags) == flags && (m.blocks[b].flags & without) == 0) return b;
  }
  return 0;
}

// The builders' collectors: a valid vector (described in NAME.expected.txt), an invalid one.
void AddValid(std::vector<EncryptedVector>* out, std::string name, std::vector<uint8_t> bytes, std::string keys,
              std::string why) {
  EncryptedVector v;
  v.name = std::move(name);
  v.bytes = std::move(bytes);
  v.top = true;
  v.keys = std::move(keys);
  v.why = std::move(why);
  out->push_back(std::move(v));
}

void AddInvalid(std::vector<EncryptedVector>* out, std::string name, std::vector<uint8_t> bytes, std::string keys,
                StatusCode open, StatusCode verify, std::string message, std::string why) {
  EncryptedVector v;
  v.name = std::move(name);
  v.bytes = std::move(bytes);
  v.valid = false;
  v.keys = std::move(keys);
  v.open_code = open;
  v.verify_code = verify;
  v.message = std::move(message);
  v.why = std::move(why);
  out->push_back(std::move(v));
}

// Payloads changed behind their checksums (and the index tag, by the key's holder): each unit's own tag decides, or
// the frame table's rules before any decryption.
Status AddPayloadVectors(const std::vector<uint8_t>& xchacha, const format::IndexModel& keyed, const WriterOptions& o,
                         std::vector<EncryptedVector>* out_ptr) {
  std::vector<EncryptedVector>& out = *out_ptr;
  const EncryptionKey a = VectorKeyA();
  const auto kAuth = StatusCode::kAuthFailed, kCorrupt = StatusCode::kCorrupt, kOk = StatusCode::kOk;
  // Two raw blocks of the same length (random pages), and a FRAMED block.
  uint32_t raw_block = UINT32_MAX, raw_twin = UINT32_MAX;
  for (uint32_t i = 0; i < keyed.blocks.size() && raw_twin == UINT32_MAX; ++i) {
    for (uint32_t j = i + 1; j < keyed.blocks.size(); ++j) {
      const BlockInfo &x = keyed.blocks[i], &y = keyed.blocks[j];
      if (!x.compressed() && !y.compressed() && x.page_count == y.page_count) {
        raw_block = i;
        raw_twin = j;
        break;
      }
    }
  }
  const uint32_t framed_block = FirstBlock(keyed, format::kBlockFramed);
  if (raw_twin == UINT32_MAX || !keyed.blocks[framed_block].framed()) {
    std::string layout;
    for (const BlockInfo& b : keyed.blocks) layout += fmt::format(" {}p/{:#x}", b.page_count, b.flags);
    return Status::Internal("encrypted vectors: the layout no longer has two raw blocks of one length and a FRAMED "
                            "block (pages/flags:" + layout + ")");
  }
  {
    HLT_ASSIGN_OR_RETURN(auto f, WithPayloads(xchacha, a, [&](auto&, auto& blocks, auto&) {
      std::swap(blocks[raw_block], blocks[raw_twin]);  // two raw blocks of as many pages: the same length
    }));
    AddInvalid(&out, "swapped-blocks.hlt", std::move(f), "a", kOk, kAuth, "authentication failed",
            "two blocks of equal length swapped, every checksum and the index tag recomputed with the key: each "
            "block's tag binds it to its index");
  }
  {
    WriterOptions other = o;
    other.file_id = EncryptedFileId(9);
    HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> twin, Build(other, FillEncrypted));
    IndexBytes ti = IndexOf(twin);
    HLT_ASSIGN_OR_RETURN(format::IndexModel tm, format::DecodeIndex(ti.bytes, ti.offset, "twin"));
    const BlockInfo& tb = tm.blocks[raw_block];
    std::vector<uint8_t> moved(twin.begin() + long(tb.offset), twin.begin() + long(tb.offset + tb.stored_length));
    HLT_ASSIGN_OR_RETURN(auto f, WithPayloads(xchacha, a, [&](auto&, auto& blocks, auto&) { blocks[raw_block] = moved; }));
    AddInvalid(&out, "block-from-another-file.hlt", std::move(f), "a", kOk, kAuth, "authentication failed",
            "a block taken from another file with the same key, content and layout (another file_id: another file "
            "key), resealed with the key");
  }
  {
    HLT_ASSIGN_OR_RETURN(auto f, WithPayloads(xchacha, a, [&](auto&, auto& blocks, auto&) {
      // The last frame loses its tag's last byte; the frame table says so, as a careless writer would.
      std::vector<uint8_t>& p = blocks[framed_block];
      p.pop_back();
      const uint32_t count = halite::LoadLe32(p.data());
      uint8_t* last = p.data() + 4 + 8 * (count - 1) + 4;
      halite::StoreLe32(last, halite::LoadLe32(last) - 1);
    }));
    AddInvalid(&out, "truncated-tag-frame.hlt", std::move(f), "a", kOk, kAuth, "frame 0: authentication failed",
            "a FRAMED block's last frame cut short by one byte of its tag, frame table and checksums agreeing: the "
            "block's length is in every frame's associated data, so the first frame decoded fails");
  }
  {
    HLT_ASSIGN_OR_RETURN(auto f, WithPayloads(xchacha, a, [&](auto&, auto&, auto& blobs) { blobs[0].pop_back(); }));
    AddInvalid(&out, "truncated-tag-blob.hlt", std::move(f), "a", kOk, kAuth, "authentication failed",
            "a sealed blob one byte short (its tag cut), checksums agreeing");
  }
  {
    HLT_ASSIGN_OR_RETURN(auto f, WithPayloads(xchacha, a, [&](auto&, auto& blocks, auto&) {
      std::vector<uint8_t>& p = blocks[framed_block];  // a page moved from frame 0 to frame 1: the same sum
      halite::StoreLe32(&p[4], halite::LoadLe32(&p[4]) - 1);
      halite::StoreLe32(&p[12], halite::LoadLe32(&p[12]) + 1);
    }));
    AddInvalid(&out, "frame-layout-changed.hlt", std::move(f), "a", kOk, kAuth, "frame 0: authentication failed",
            "a frame table's page counts changed (one page moved from frame 0 to frame 1): each frame's tag binds "
            "its place");
  }
  {
    HLT_ASSIGN_OR_RETURN(auto f, WithPayloads(xchacha, a, [&](auto&, auto& blocks, auto&) {
      halite::StoreLe32(blocks[framed_block].data(), 1);
    }));
    AddInvalid(&out, "frame-count-one.hlt", std::move(f), "a", kOk, kCorrupt, "frame_count 1 (expected 2..",
            "a frame table with one frame: rejected before anything is decrypted");
  }
  return Status::Ok();
}

// The header and the index changed: the index tag decides, or (resealed by the key's holder) a rule of 13.4-13.6.
Status AddIndexVectors(const std::vector<uint8_t>& xchacha, const format::IndexModel& keyed,
                       std::vector<EncryptedVector>* out_ptr) {
  std::vector<EncryptedVector>& out = *out_ptr;
  const EncryptionKey a = VectorKeyA();
  const auto kAuth = StatusCode::kAuthFailed, kCorrupt = StatusCode::kCorrupt, kOk = StatusCode::kOk;
  {
    auto f = xchacha;
    IndexBytes idx = IndexOf(f);
    const size_t creator = testing::FindSectionBody(idx.bytes, format::SectionType::kMetadata) + 40;
    f[idx.offset + creator] ^= 0x01;  // "libhalite" -> "mibhalite"
    testing::ResealAllChecksums(f);
    AddInvalid(&out, "tampered-index.hlt", std::move(f), "a", kAuth, kOk, "index tag mismatch",
            "one byte of the (readable) METADATA changed, checksums recomputed: the index tag fails at open");
  }
  {
    auto f = xchacha;
    IndexBytes idx = IndexOf(f);
    f[idx.offset + testing::FindSectionBody(idx.bytes, format::SectionType::kPageMap) + 5] ^= 0x01;
    testing::ResealWithKey(f, a);
    AddInvalid(&out, "tampered-page-map.hlt", std::move(f), "a", kAuth, kOk, "PAGE_MAP at offset",
            "a byte of the sealed PAGE_MAP changed and the index tag recomputed: the section's own tag fails");
  }
  {
    format::IndexModel m = keyed;
    m.page_map[3] = format::kPageMapFirstSlot + 5000;
    HLT_ASSIGN_OR_RETURN(auto f, WithKeyedModel(xchacha, m, a));
    AddInvalid(&out, "sealed-page-map-bad-slot.hlt", std::move(f), "a", kCorrupt, kOk, "references slot 5000",
            "a sealed PAGE_MAP, correctly sealed, that references a slot past the last: once opened, every rule of "
            "5.3 applies");
  }
  {
    HLT_ASSIGN_OR_RETURN(auto f, WithKeyedModel(xchacha, keyed, a, /*seal=*/false));
    AddInvalid(&out, "unsealed-page-map.hlt", std::move(f), "a", kCorrupt, kOk, "not SEALED in an encrypted file",
            "an encrypted file whose PAGE_MAP, DICTIONARY and PAGE_HASHES are stored in the clear");
  }
  {
    auto f = xchacha;
    IndexBytes idx = IndexOf(f);
    const size_t regions = testing::FindSectionBody(idx.bytes, format::SectionType::kRegions) - 16;
    f[idx.offset + regions + 4] |= 0x02;
    testing::ResealWithKey(f, a);
    AddInvalid(&out, "sealed-regions.hlt", std::move(f), "a", kCorrupt, kOk, "reserved section flags 0x2",
            "the SEALED flag on REGIONS, which is never sealed (13.4)");
  }
  {
    auto f = xchacha;
    IndexBytes idx = IndexOf(f);
    f[idx.offset + idx.bytes.size() - 24] = 3;  // ENCRYPTION's cipher
    testing::ResealAllChecksums(f);
    AddInvalid(&out, "unknown-cipher.hlt", std::move(f), "a", kCorrupt, kOk, "cipher 3",
            "an ENCRYPTION section naming cipher 3");
  }
  {
    format::IndexModel m = keyed;
    std::vector<uint8_t> index = format::EncodeIndex(m);  // no ENCRYPTION section at all
    auto f = testing::ResealWithIndex(xchacha, index);
    AddInvalid(&out, "encryption-section-missing.hlt", std::move(f), "a", kCorrupt, kOk, "the last section is not ENCRYPTION",
            "the header says ENCRYPTED, the index has no ENCRYPTION section");
  }
  {
    auto f = WithHeader(xchacha, [](format::Header& h) {
      h.flags &= ~format::kHeaderEncrypted;
      h.key_id = {};
    });
    AddInvalid(&out, "encrypted-flag-clear.hlt", std::move(f), "a", kCorrupt, kOk,
            "ENCRYPTED flag is clear but the index has an ENCRYPTION section",
            "an encrypted file whose header flag was cleared");
  }
  {
    auto f = WithHeader(xchacha, [](format::Header& h) { h.flags |= format::kHeaderAuthenticated; });
    AddInvalid(&out, "encrypted-and-authenticated.hlt", std::move(f), "a", kCorrupt, kOk,
            "AUTHENTICATED and ENCRYPTED are both set", "both header flags");
  }
  {
    auto f = WithHeader(xchacha, [](format::Header& h) { h.key_id = {}; });
    AddInvalid(&out, "key-id-zero.hlt", std::move(f), "a", kCorrupt, kOk, "key_id is all zero", "an all-zero key id");
  }
  {
    auto f = WithHeader(xchacha, [](format::Header& h) { h.minor = 3; });
    testing::ResealWithKey(f, a);
    AddInvalid(&out, "encrypted-in-version-1.3.hlt", std::move(f), "a", kCorrupt, kOk,
            "format version 1.3 but the index uses version 1.6 features (a packed PAGE_MAP; encryption)",
            "an encrypted file that declares 1.3 (the index tag recomputed: the version rule decides)");
  }
  return Status::Ok();
}

}  // namespace

EncryptionKey VectorKeyA() { return KeyFrom(0x40); }
EncryptionKey VectorKeyB() { return KeyFrom(0x60); }

ReaderOptions VectorKeys(const std::string& keys) {
  ReaderOptions o;
  auto ring = std::make_shared<Keyring>();
  if (keys.find('a') != std::string::npos) (void)ring->Add(VectorKeyA());
  if (keys.find('b') != std::string::npos) (void)ring->Add(VectorKeyB());
  if (!keys.empty()) o.keyring = ring;
  return o;
}

Result<std::vector<EncryptedVector>> BuildEncryptedVectors() {
  std::vector<EncryptedVector> out;
  const EncryptionKey a = VectorKeyA(), b = VectorKeyB();
  WriterOptions o = Options(1, Cipher::kXChaCha20Poly1305, a);
  o.block_pages = 8;
  o.frame_pages = 4;
  o.zstd_block_pages = 2;
  o.dictionary = DictionaryMode::kOn;
  o.page_hashes = true;
  HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> xchacha, Build(o, FillEncrypted));
  AddValid(&out, "xchacha20poly1305.hlt", xchacha, "a",
        "XChaCha20-Poly1305, key A: 8-page blocks of two 4-page frames each sealed on its own, a sealed dictionary, "
        "two raw blocks, a working set, sealed PAGE_MAP and PAGE_HASHES, two sealed blobs");
  {
    WriterOptions aes_options = o;
    aes_options.cipher = Cipher::kAes256Gcm;
    HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> aes, Build(aes_options, FillEncrypted));
    AddValid(&out, "aes256gcm.hlt", std::move(aes), "a", "the same content with AES-256-GCM, key A");
  }
  // A chain that mixes keys: the base under key A, the child under key B (format-spec 12, 13.6).
  WriterOptions base_options = Options(2, Cipher::kXChaCha20Poly1305, a);
  base_options.block_pages = 2;
  base_options.page_hashes = true;
  HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> base, Build(base_options, FillChainBase));
  AddValid(&out, "chain-base.hlt", base, "a", "a chain's base, key A");
  {
    WriterOptions child_options = Options(3, Cipher::kXChaCha20Poly1305, b);
    child_options.block_pages = 2;
    child_options.parent_rewrite_fraction = 2;  // every equal page a reference
    ReaderOptions ro = VectorKeys("a");
    HLT_ASSIGN_OR_RETURN(auto parent, CheckpointReader::Open(NewMemoryFile("chain-base.hlt", base), ro));
    child_options.parent = std::shared_ptr<const CheckpointReader>(std::move(parent));
    child_options.parent_path_hint = "chain-base.hlt";
    child_options.code_against_parent = true;  // 5.4 BASED: coded against the parent's plaintext, sealed under B
    HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> child, Build(child_options, FillChainChild));
    HLT_ASSIGN_OR_RETURN(format::IndexModel child_model, KeyedModel(child, b));
    if (std::none_of(child_model.blocks.begin(), child_model.blocks.end(), [](const BlockInfo& i) { return i.based(); })) {
      return Status::Internal("encrypted vectors: chain-child.hlt no longer has a BASED block");
    }
    AddValid(&out, "chain-child.hlt", std::move(child), "ab",
          "its child under key B (parent \"chain-base.hlt\"), its two changed pages in BASED blocks coded against "
          "the parent's (format 1.4 blocks in a 1.5 file): read with a keyring holding both keys");
  }

  HLT_ASSIGN_OR_RETURN(format::IndexModel keyed, KeyedModel(xchacha, a));
  HLT_RETURN_IF_ERROR(AddPayloadVectors(xchacha, keyed, o, &out));
  HLT_RETURN_IF_ERROR(AddIndexVectors(xchacha, keyed, &out));
  return out;
}

std::vector<KeyCase> EncryptedKeyCases() {
  const std::string a = KeyIdHex(*ComputeKeyId(VectorKeyA()));
  return {
      {"xchacha20poly1305.hlt", "b", false, StatusCode::kAuthFailed, "encrypted with key id " + a,
       "the wrong key (B): refused at open, naming the key id the file needs"},
      {"xchacha20poly1305.hlt", "", false, StatusCode::kAuthFailed, "encrypted with key id " + a,
       "no key: refused at open, naming the key id"},
      {"xchacha20poly1305.hlt", "", true, StatusCode::kOk, "",
       "no key, open_without_key: opens sealed; verify checks every payload's checksum"},
      {"chain-child.hlt", "b", false, StatusCode::kAuthFailed, "encrypted with key id " + a,
       "the child's key alone: its parent (key A) is refused, naming A's id and the parent"},
  };
}

}  // namespace halite::vectors
