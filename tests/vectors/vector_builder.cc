#include "vectors/vector_builder.h"

#include <cstring>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "codec/hashing.h"
#include "format/byte_order.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/checkpoint_writer.h"
#include "support/checksum_reseal.h"
#include "support/synthetic_memory.h"

namespace halite::vectors {
namespace {

constexpr size_t kPage = 4096;
const FileId kVectorFileId = {0x48, 0x4c, 0x54, 0x2d, 0x76, 0x65, 0x63, 0x74,
                              0x6f, 0x72, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x31};

// A skippable section type (5.9) no reader knows, and its body, for the skippable-section vectors.
constexpr uint32_t kVectorSkippableType = format::kSkippableSectionBit | 0x7e57;
const std::string kVectorSkippableText = "an optional section: readers that do not know type 0x80007e57 skip it";

WriterOptions DeterministicOptions() {
  WriterOptions o;
  o.file_id = kVectorFileId;
  o.deterministic = true;
  o.threads = 2;
  o.dictionary = DictionaryMode::kOff;
  o.sink.use_io_uring = false;
  o.metadata.creator = "libhalite test vectors";
  return o;
}

std::vector<uint8_t> Page(testing::PageFlavor flavor, uint64_t seed) {
  std::vector<uint8_t> p(kPage);
  testing::SyntheticMemory(seed).MakePage(flavor, p.data());
  return p;
}

// Builds one checkpoint in memory with `fill` adding regions, pages, hints and blobs.
template <typename F>
Result<ValidVector> Build(const std::string& name, WriterOptions opt, F fill) {
  std::vector<uint8_t> bytes;
  HLT_ASSIGN_OR_RETURN(auto w, CheckpointWriter::Create(NewMemorySink(name, &bytes), std::move(opt)));
  HLT_RETURN_IF_ERROR(fill(*w));
  HLT_ASSIGN_OR_RETURN(auto summary, w->Finish());
  (void)summary;
  return ValidVector{name, std::move(bytes)};
}

// minimal: 8 pages: stored text, zero, a duplicate of page 0, absent, random (stored raw), code...
Status FillMinimal(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 8 * kPage));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 0, Page(testing::PageFlavor::kText, 1)));
  HLT_RETURN_IF_ERROR(w.PutZeroPages(r, 1, 1));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 2, Page(testing::PageFlavor::kText, 1)));  // duplicate of page 0
  // page 3 absent
  HLT_RETURN_IF_ERROR(w.PutPage(r, 4, Page(testing::PageFlavor::kRandom, 4)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 5, Page(testing::PageFlavor::kCode, 5)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 6, Page(testing::PageFlavor::kPointers, 6)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 7, std::vector<uint8_t>(kPage, 0)));  // all-zero bytes: recorded as zero
  return Status::Ok();
}

// multi-region: QEMU-like regions, a device-state blob, an access trace (hot blocks) and VA hints.
Status FillMultiRegion(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t ram, w.AddRegion("pc.ram", 0, 32 * kPage));
  HLT_ASSIGN_OR_RETURN(uint32_t vga, w.AddRegion("vga.vram", 0xfd000000, 16 * kPage, 16384));
  HLT_ASSIGN_OR_RETURN(uint32_t rom, w.AddRegion("/rom@etc/acpi/tables", 0, 2 * kPage));
  testing::SyntheticMemory mem(7);
  std::vector<uint8_t> buf(kPage);
  for (uint64_t p = 0; p < 32; ++p) {
    mem.Fill(buf);
    HLT_RETURN_IF_ERROR(w.PutPage(ram, p, buf));
  }
  for (uint64_t p = 0; p < 16; p += 2) HLT_RETURN_IF_ERROR(w.PutPage(vga, p, Page(testing::PageFlavor::kSparse, 100 + p)));
  HLT_RETURN_IF_ERROR(w.PutZeroPages(vga, 1, 1));
  HLT_RETURN_IF_ERROR(w.PutPage(rom, 0, Page(testing::PageFlavor::kText, 200)));
  std::vector<PageRun> access = {{{ram, 20}, 3, 0}, {{vga, 4}, 1, 0}, {{ram, 5}, 1, 0}, {{ram, 21}, 1, 0}};
  HLT_RETURN_IF_ERROR(w.AddAccessedPages(access));
  std::vector<PageRun> va = {{{ram, 30}, 2, 0}, {{ram, 0}, 4, 0}, {{ram, 10}, 4, 1}};
  HLT_RETURN_IF_ERROR(w.AddVaRuns(va));
  std::string state = "QEVM device state: serial, pit, rtc, i440fx ... repeated for compression. ";
  std::string blob;
  for (int i = 0; i < 20; ++i) blob += state;
  HLT_RETURN_IF_ERROR(w.AddBlob("qemu.device-state", std::span(reinterpret_cast<const uint8_t*>(blob.data()), blob.size())));
  const uint8_t tiny[] = {1, 2, 3};
  HLT_RETURN_IF_ERROR(w.AddBlob("tiny", tiny));
  return Status::Ok();
}

Status FillDictionary(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 96 * kPage));
  testing::SyntheticMemory mem(11);
  std::vector<uint8_t> buf(kPage);
  for (uint64_t p = 0; p < 96; ++p) {
    // Text and code only, so every page is stored and the dictionary has material.
    mem.MakePage(p % 3 ? testing::PageFlavor::kText : testing::PageFlavor::kCode, buf.data());
    buf[0] = uint8_t(p);  // no duplicates
    buf[1] = uint8_t(p >> 8);
    HLT_RETURN_IF_ERROR(w.PutPage(r, p, buf));
  }
  return Status::Ok();
}

// The minimal content plus a blob, authenticated with TestMacKey().
Status FillAuthenticated(CheckpointWriter& w) {
  HLT_RETURN_IF_ERROR(FillMinimal(w));
  const uint8_t state[] = {'d', 'e', 'v', 'i', 'c', 'e', 's'};
  return w.AddBlob("state", state);
}

Status FillAllZero(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0x100000, 4 * kPage));
  return w.PutZeroPages(r, 0, 4);
}

// --- invalid vectors: patches of a valid file, re-checksummed where the point is a deeper rule ---

struct Parts {
  format::Footer footer;
  std::vector<uint8_t> index;
};

Parts Split(const std::vector<uint8_t>& f) {
  Parts p;
  p.footer.index_offset = format::LoadLe64(&f[f.size() - 64]);
  p.footer.index_length = format::LoadLe64(&f[f.size() - 56]);
  p.footer.file_size = format::LoadLe64(&f[f.size() - 48]);
  std::memcpy(p.footer.file_id.data(), &f[f.size() - 40], 16);
  p.footer.index_checksum = format::LoadLe64(&f[f.size() - 24]);
  p.index.assign(f.begin() + long(p.footer.index_offset), f.begin() + long(p.footer.index_offset + p.footer.index_length));
  return p;
}

// Rebuilds the file with a modified index, recomputing the index checksum and footer.
std::vector<uint8_t> WithIndex(const std::vector<uint8_t>& f, const std::vector<uint8_t>& index) {
  return testing::ResealWithIndex(f, index);
}

size_t SectionBody(const std::vector<uint8_t>& index, format::SectionType type) {
  return testing::FindSectionBody(index, type);
}

// One section of an index as stored: its 16-byte header, body and padding.
struct StoredSection {
  uint32_t type;
  std::vector<uint8_t> bytes;
};

std::vector<StoredSection> SplitSections(const std::vector<uint8_t>& index) {
  std::vector<StoredSection> out;
  size_t at = 0;
  while (at + 16 <= index.size()) {
    uint64_t len = format::LoadLe64(&index[at + 8]);
    size_t end = at + 16 + size_t((len + 7) / 8 * 8);
    out.push_back({format::LoadLe32(&index[at]), std::vector<uint8_t>(index.begin() + long(at), index.begin() + long(end))});
    at = end;
  }
  return out;
}

std::vector<uint8_t> JoinSections(const std::vector<StoredSection>& sections) {
  std::vector<uint8_t> out;
  for (const auto& s : sections) out.insert(out.end(), s.bytes.begin(), s.bytes.end());
  return out;
}

// The index sections of `f` in the order given by `types` (a type may repeat; missing types are dropped).
std::vector<uint8_t> ReorderSections(const std::vector<uint8_t>& f, std::initializer_list<format::SectionType> types) {
  auto sections = SplitSections(Split(f).index);
  std::vector<StoredSection> out;
  for (auto t : types) {
    for (const auto& s : sections) {
      if (s.type == uint32_t(t)) out.push_back(s);
    }
  }
  return WithIndex(f, JoinSections(out));
}

// A skippable section (5.9) of `type` holding `text`, inserted before the section at position `before` (or at the
// end when `before` is past the last).
std::vector<uint8_t> WithSkippableSection(const std::vector<uint8_t>& f, uint32_t type, const std::string& text,
                                          size_t before) {
  auto sections = SplitSections(Split(f).index);
  std::vector<uint8_t> bytes(16);
  format::StoreLe32(&bytes[0], type);
  format::StoreLe64(&bytes[8], text.size());
  bytes.insert(bytes.end(), text.begin(), text.end());
  bytes.resize(16 + (text.size() + 7) / 8 * 8, 0);
  sections.insert(sections.begin() + long(std::min(before, sections.size())), StoredSection{type, bytes});
  return WithIndex(f, JoinSections(sections));
}

// The decoded index of a valid file, to change one rule's worth and encode again.
format::IndexModel ModelOf(const std::vector<uint8_t>& f) {
  Parts p = Split(f);
  auto m = format::DecodeIndex(p.index, p.footer.index_offset, "vector");
  return m ? std::move(*m) : format::IndexModel{};
}

// `f` with its index encoded from `m` (the MAC section, if any, is carried over unchanged).
std::vector<uint8_t> WithModel(const std::vector<uint8_t>& f, const format::IndexModel& m) {
  std::vector<uint8_t> index = format::EncodeIndex(m);
  if (m.mac.present) {
    auto mac = format::EncodeMacSection(m.mac);
    index.insert(index.end(), mac.begin(), mac.end());
  }
  return WithIndex(f, index);
}

// `f` with block `block`'s payload replaced by `payload` (flags kept unless given); later payloads move, and every checksum is
// recomputed so the payload's own rule is what a reader trips on.
std::vector<uint8_t> WithBlockPayload(const std::vector<uint8_t>& f, uint32_t block, std::vector<uint8_t> payload,
                                      std::optional<uint32_t> flags = std::nullopt) {
  format::IndexModel m = ModelOf(f);
  if (flags) m.blocks[block].flags = *flags;
  std::vector<std::vector<uint8_t>> blocks, blobs;
  for (const auto& b : m.blocks) blocks.emplace_back(f.begin() + long(b.offset), f.begin() + long(b.offset + b.stored_length));
  for (const auto& b : m.blobs) blobs.emplace_back(f.begin() + long(b.offset), f.begin() + long(b.offset + b.stored_length));
  blocks[block] = std::move(payload);
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
  std::memcpy(footer.file_id.data(), &f[16], 16);
  std::vector<uint8_t> index = format::EncodeIndex(m);
  out.insert(out.end(), index.begin(), index.end());
  footer.index_length = index.size();
  footer.file_size = out.size() + format::kFooterSize;
  auto fb = format::EncodeFooter(footer);
  out.insert(out.end(), fb.begin(), fb.end());
  testing::ResealAllChecksums(out);
  return out;
}

// A hand-made zstd frame (RFC 8878) of one RLE block: `content_size` bytes of 'A'. `declare_size` writes the
// Frame_Content_Size field (else a Window_Descriptor), `dict_id` (when non-zero) a one-byte Dictionary_ID.
std::vector<uint8_t> ZstdRleFrame(uint32_t content_size, bool declare_size, uint8_t dict_id) {
  std::vector<uint8_t> f = {0x28, 0xB5, 0x2F, 0xFD};
  uint8_t descriptor = dict_id ? 1 : 0;                  // Dictionary_ID_Flag: 1 byte
  if (declare_size) descriptor |= (2u << 6) | (1u << 5);  // 4-byte Frame_Content_Size, Single_Segment
  f.push_back(descriptor);
  if (!declare_size) f.push_back(0x18);                   // Window_Descriptor: 2^(10+3) = 8 KiB window
  if (dict_id) f.push_back(dict_id);
  if (declare_size) {
    uint8_t le[4];
    format::StoreLe32(le, content_size);
    f.insert(f.end(), le, le + 4);
  }
  uint32_t block_header = 1u | (1u << 1) | (content_size << 3);  // Last_Block, RLE, Block_Size
  f.push_back(uint8_t(block_header));
  f.push_back(uint8_t(block_header >> 8));
  f.push_back(uint8_t(block_header >> 16));
  f.push_back('A');
  return f;
}

// The first COMPRESSED block without a dictionary, and its raw size.
std::pair<uint32_t, uint32_t> FirstCompressedBlock(const std::vector<uint8_t>& f) {
  format::IndexModel m = ModelOf(f);
  for (uint32_t b = 0; b < m.blocks.size(); ++b) {
    if (m.blocks[b].compressed() && !m.blocks[b].uses_dictionary()) return {b, m.blocks[b].page_count * uint32_t(kPage)};
  }
  return {0, 0};
}

std::vector<uint8_t> RewriteHeader(std::vector<uint8_t> f, uint16_t minor, uint16_t major, uint32_t flags = 0) {
  format::Header h;
  h.major = major;
  h.minor = minor;
  h.flags = flags;
  std::memcpy(h.file_id.data(), &f[16], 16);
  auto hb = format::EncodeHeader(h);
  std::copy(hb.begin(), hb.end(), f.begin());
  return f;
}

}  // namespace

MacKey TestMacKey() {
  MacKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(i);
  return k;
}

Result<std::vector<ValidVector>> BuildValidVectors() {
  std::vector<ValidVector> out;
  WriterOptions o = DeterministicOptions();
  o.block_pages = 2;
  HLT_ASSIGN_OR_RETURN(auto minimal, Build("minimal.hlt", o, FillMinimal));
  out.push_back(std::move(minimal));

  o = DeterministicOptions();
  o.block_pages = 4;
  o.metadata.vmm_kind = VmmKind::kQemu;
  o.metadata.machine_type = "pc-i440fx-7.2";
  o.metadata.vm_uuid = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8};
  HLT_ASSIGN_OR_RETURN(auto multi, Build("multi-region.hlt", o, FillMultiRegion));
  out.push_back(std::move(multi));

  o = DeterministicOptions();
  o.block_pages = 8;
  o.dictionary = DictionaryMode::kOn;
  HLT_ASSIGN_OR_RETURN(auto dict, Build("dictionary.hlt", o, FillDictionary));
  out.push_back(std::move(dict));

  o = DeterministicOptions();
  o.block_pages = 2;
  o.mac_key = TestMacKey();
  HLT_ASSIGN_OR_RETURN(auto authenticated, Build("authenticated.hlt", o, FillAuthenticated));
  out.push_back(std::move(authenticated));

  o = DeterministicOptions();
  o.metadata.vmm_kind = VmmKind::kXen;
  HLT_ASSIGN_OR_RETURN(auto zero, Build("all-zero.hlt", o, FillAllZero));
  out.push_back(std::move(zero));

  // 5.9: minimal.hlt plus a skippable section of a type no reader knows; version 1.1, same content.
  std::vector<uint8_t> skippable = WithSkippableSection(RewriteHeader(out[0].bytes, 1, 1), kVectorSkippableType,
                                                        kVectorSkippableText, SIZE_MAX);
  out.push_back(ValidVector{"skippable-section.hlt", std::move(skippable)});
  return out;
}

Result<std::vector<InvalidVector>> BuildInvalidVectors(const std::vector<ValidVector>& valid) {
  const std::vector<uint8_t>& m = valid[0].bytes;  // minimal.hlt
  const std::vector<uint8_t>& multi = valid[1].bytes;
  const std::vector<uint8_t>& dict = valid[2].bytes;
  const std::vector<uint8_t>& authenticated = valid[3].bytes;
  std::vector<InvalidVector> v;
  const auto kC = StatusCode::kCorrupt;
  const auto kOk = StatusCode::kOk;
  auto add = [&](std::string name, std::vector<uint8_t> bytes, StatusCode open, StatusCode verify, std::string msg,
                 std::string why) {
    v.push_back(InvalidVector{std::move(name), std::move(bytes), open, verify, std::move(msg), std::move(why)});
  };

  add("empty.hlt", {}, kC, kOk, "at least 128", "a zero-length file");
  add("truncated-footer.hlt", std::vector<uint8_t>(m.begin(), m.end() - 1), kC, kOk, "bad magic",
      "the last byte cut off: the footer magic is not at the end");
  add("truncated-half.hlt", std::vector<uint8_t>(m.begin(), m.begin() + long(m.size() / 2)), kC, kOk, "bad magic",
      "cut in the middle");
  {
    auto f = m;
    f[0] = 'X';
    add("bad-header-magic.hlt", f, kC, kOk, "bad magic (expected \"HLTCKPT", "header magic damaged");
  }
  {
    auto f = m;
    f[20] ^= 1;
    add("bad-header-checksum.hlt", f, kC, kOk, "header at offset 0x38: checksum mismatch", "a file_id byte flipped");
  }
  add("version-1.2.hlt", RewriteHeader(m, 2, 1), StatusCode::kUnsupported, kOk, "format version 1.2",
      "a newer minor version (re-checksummed): unsupported, not corrupt");
  add("version-2.0.hlt", RewriteHeader(m, 0, 2), StatusCode::kUnsupported, kOk, "format version 2.0",
      "a newer major version");
  {
    auto f = m;
    f[f.size() - 64 + 16] ^= 1;  // footer file_size
    add("bad-footer-checksum.hlt", f, kC, kOk, "footer at offset", "footer file_size damaged (checksum catches it)");
  }
  {
    Parts p = Split(m);
    auto f = m;
    f[p.footer.index_offset + 3] ^= 0x10;
    add("bad-index-checksum.hlt", f, kC, kOk, "index at offset", "one index byte flipped");
  }
  {
    auto f = m;
    f[64 + 10] ^= 0xff;  // inside block 0's payload
    add("bad-block-checksum.hlt", f, kOk, kC, "block 0 at offset 0x40: checksum mismatch",
        "a payload byte flipped: opens, fails verification");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kMetadata);
    idx[body + 4] = 1;  // METADATA reserved
    add("reserved-nonzero.hlt", WithIndex(m, idx), kC, kOk, "reserved is not zero", "a reserved field set");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    // REGIONS entry 0: name "ram" is 3 bytes at entry+24, then 5 bytes of padding.
    size_t body = SectionBody(idx, format::SectionType::kRegions);
    idx[body + 8 + 24 + 3] = 0x20;
    add("padding-nonzero.hlt", WithIndex(m, idx), kC, kOk, "padding is not zero", "region entry padding not zero");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kRegions);
    format::StoreLe64(&idx[body + 8 + 8], 1ull << 60);  // region size
    add("region-2e60.hlt", WithIndex(m, idx), kC, kOk, "more than 2^31 pages",
        "a region claiming 2^60 bytes: rejected before allocating");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kBlocks);
    format::StoreLe32(&idx[body + 8 + 12], 0xffffffffu);  // block 0 page_count
    add("block-2e32-pages.hlt", WithIndex(m, idx), kC, kOk, "page_count 4294967295", "a block claiming 2^32-1 pages");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kPageMap);
    format::StoreLe32(&idx[body + 4 * 5], 1000);  // page 5 -> slot 998
    add("slot-out-of-range.hlt", WithIndex(m, idx), kC, kOk, "references slot 998", "a page pointing past the last slot");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kPageMap);
    format::StoreLe32(&idx[body + 4 * 5], format::LoadLe32(&idx[body + 4 * 4]));  // page 5 -> page 4's slot
    add("slot-unreferenced.hlt", WithIndex(m, idx), kC, kOk, "is referenced by no page",
        "a stored slot no page uses (unchecked bytes)");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kBlocks);
    format::StoreLe64(&idx[body + 8], 65);  // block 0 offset
    add("block-gap.hlt", WithIndex(m, idx), kC, kOk, "payloads are contiguous", "block 0 not at offset 64");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kRestoreOrder);
    format::StoreLe32(&idx[body + 8], format::LoadLe32(&idx[body + 12]));  // duplicate entry
    add("order-not-permutation.hlt", WithIndex(m, idx), kC, kOk, "permutation", "restore order repeats a block");
  }
  {
    Parts p = Split(multi);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kBlocks);
    format::StoreLe32(&idx[body + 8 + 16], format::LoadLe32(&idx[body + 8 + 16]) ^ format::kBlockHot);
    add("hot-flag-mismatch.hlt", WithIndex(multi, idx), kC, kOk, "HOT flag disagrees",
        "a block's HOT flag differs from the working set");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    idx[0] = 9;  // first section type
    add("unknown-section.hlt", WithIndex(m, idx), kC, kOk, "unknown section type 9", "an unknown section type");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    idx.insert(idx.end(), 8, 0);  // 8 bytes after the last section
    add("index-trailing.hlt", WithIndex(m, idx), kC, kOk, "section header", "bytes after the last section");
  }
  {
    auto f = multi;
    // Blob payload damaged: the blob "tiny" is the last payload before the index.
    Parts p = Split(multi);
    f[p.footer.index_offset - 1] ^= 0x55;
    add("bad-blob-checksum.hlt", f, kOk, kC, "blob \"tiny\"", "a blob payload byte flipped");
  }

  // --- section order (5): out of order, repeated, missing ---
  using ST = format::SectionType;
  {
    // Required sections are consecutive, so a swap among them reads as "missing"; out of order proper is an
    // optional section after a later one: DICTIONARY after MAC.
    auto model = ModelOf(dict);
    model.mac.present = true;
    model.mac.block_macs.resize(model.blocks.size());
    model.mac.blob_macs.resize(model.blobs.size());
    std::vector<uint8_t> index = format::EncodeIndex(model);
    auto mac = format::EncodeMacSection(model.mac);
    index.insert(index.end(), mac.begin(), mac.end());
    auto sections = SplitSections(index);
    std::swap(sections[sections.size() - 2], sections[sections.size() - 1]);
    add("section-out-of-order.hlt", WithIndex(dict, JoinSections(sections)), kC, kOk,
        "section out of order or repeated (after MAC)", "DICTIONARY after MAC");
  }
  add("section-repeated.hlt",
      ReorderSections(m, {ST::kMetadata, ST::kRegions, ST::kRegions, ST::kPageMap, ST::kBlocks, ST::kBlobs,
                          ST::kRestoreOrder}),
      kC, kOk, "section out of order or repeated (after REGIONS)", "REGIONS twice");
  add("section-missing.hlt",
      ReorderSections(m, {ST::kMetadata, ST::kRegions, ST::kPageMap, ST::kBlocks, ST::kRestoreOrder}), kC, kOk,
      "required section BLOBS is missing", "no BLOBS section");
  add("section-missing-last.hlt",
      ReorderSections(m, {ST::kMetadata, ST::kRegions, ST::kPageMap, ST::kBlocks, ST::kBlobs}), kC, kOk,
      "required section RESTORE_ORDER is missing", "the index ends before RESTORE_ORDER");
  // --- names (5.1, 5.2, 5.5): unique and printable ---
  {
    auto model = ModelOf(multi);
    model.regions[1].name = model.regions[0].name;
    add("duplicate-region-name.hlt", WithModel(multi, model), kC, kOk, "duplicate region name \"pc.ram\"",
        "two regions named pc.ram");
  }
  {
    auto model = ModelOf(multi);
    model.blobs[1].name = model.blobs[0].name;
    add("duplicate-blob-name.hlt", WithModel(multi, model), kC, kOk, "duplicate blob name \"qemu.device-state\"",
        "two blobs named qemu.device-state");
  }
  {
    auto model = ModelOf(m);
    model.regions[0].name = "r\x01m";
    add("region-name-control.hlt", WithModel(m, model), kC, kOk, "name is not printable ASCII",
        "a control character in a region name");
  }
  {
    auto model = ModelOf(multi);
    model.blobs[1].name = "t\xc3\xafny";  // UTF-8 is not printable ASCII
    add("blob-name-non-ascii.hlt", WithModel(multi, model), kC, kOk, "name is not printable ASCII",
        "a non-ASCII byte in a blob name");
  }
  {
    auto model = ModelOf(m);
    model.metadata.creator = "libhalite\ttest";
    add("creator-control.hlt", WithModel(m, model), kC, kOk, "creator is not printable ASCII",
        "a tab in the metadata creator string");
  }
  // --- dictionary (5.4, 5.7) ---
  {
    auto [block, raw] = FirstCompressedBlock(m);
    add("dictionary-flag-on-raw-block.hlt",
        WithBlockPayload(m, block, std::vector<uint8_t>(raw, 0x41), format::kBlockDictionary), kC, kOk,
        "DICTIONARY flag on an uncompressed block", "a raw (not COMPRESSED) block flagged DICTIONARY");
  }
  {
    auto model = ModelOf(m);
    model.dictionary = ModelOf(dict).dictionary;
    auto f = WithModel(m, model);
    Parts p = Split(f);
    uint64_t section_at = p.footer.index_offset + SectionBody(p.index, ST::kDictionary) - format::kSectionHeaderSize;
    add("dictionary-unused.hlt", f, kC, kOk,
        "index DICTIONARY at offset " + fmt::format("{:#x}", section_at) + ": present but no block uses it",
        "a DICTIONARY section no block uses; the error names that section's offset");
  }
  {
    auto model = ModelOf(dict);
    model.dictionary.clear();
    add("dictionary-absent.hlt", WithModel(dict, model), kC, kOk, "a block uses a dictionary but there is no DICTIONARY",
        "blocks flagged DICTIONARY, no DICTIONARY section");
  }
  {
    auto model = ModelOf(dict);
    std::fill(model.dictionary.begin(), model.dictionary.begin() + 8, uint8_t{0x5a});  // the magic and dictionary ID
    add("dictionary-no-header.hlt", WithModel(dict, model), kC, kOk, "dictionary has no zstd dictionary header",
        "a DICTIONARY body without the zstd dictionary header (raw content)");
  }
  // --- AUTHENTICATED flag vs MAC section (3, 5.8) ---
  add("authenticated-flag-without-mac.hlt", RewriteHeader(m, 0, 1, format::kHeaderAuthenticated), kC, kOk,
      "AUTHENTICATED flag is set but the index has no MAC", "flag set, no MAC section");
  add("mac-without-authenticated-flag.hlt", RewriteHeader(authenticated, 0, 1, 0), kC, kOk,
      "AUTHENTICATED flag is clear but the index has a MAC", "MAC section, flag clear");
  // --- zstd frames of COMPRESSED blocks (5.4); each frame is hand-made, checksums recomputed ---
  {
    auto [block, raw] = FirstCompressedBlock(m);
    add("zstd-not-a-frame.hlt", WithBlockPayload(m, block, {'n', 'o', 't', ' ', 'z', 's', 't', 'd'}), kOk, kC,
        "payload is not a zstd frame", "a COMPRESSED block whose payload has no zstd magic");
    add("zstd-no-content-size.hlt", WithBlockPayload(m, block, ZstdRleFrame(raw, false, 0)), kOk, kC,
        "zstd frame does not declare its content size", "a frame without Frame_Content_Size");
    add("zstd-wrong-content-size.hlt", WithBlockPayload(m, block, ZstdRleFrame(raw - 1, true, 0)), kOk, kC,
        "zstd frame declares", "a frame declaring one byte less than the block's pages");
    auto trailing = ZstdRleFrame(raw, true, 0);
    trailing.push_back(0);
    add("zstd-trailing-bytes.hlt", WithBlockPayload(m, block, trailing), kOk, kC, "bytes after the zstd frame",
        "a valid frame followed by one more byte");
    add("zstd-dictionary-id-without-flag.hlt", WithBlockPayload(m, block, ZstdRleFrame(raw, true, 42)), kOk, kC,
        "zstd frame needs a dictionary but none applies", "a frame naming dictionary 42 on a block without DICTIONARY");
  }
  // --- skippable sections (5.9) ---
  {
    const std::vector<uint8_t>& skippable = valid[5].bytes;
    add("skippable-in-version-1.0.hlt", RewriteHeader(skippable, 0, 1), kC, kOk,
        "format version 1.0 but the index uses version 1.1 features",
        "a skippable section in a file that declares 1.0");
    add("skippable-before-required.hlt",
        WithSkippableSection(RewriteHeader(m, 1, 1), kVectorSkippableType, kVectorSkippableText, 4), kC, kOk,
        "before the required section BLOBS", "a skippable section between BLOCKS and BLOBS");
    add("skippable-after-mac.hlt",
        WithSkippableSection(RewriteHeader(authenticated, 1, 1, format::kHeaderAuthenticated), kVectorSkippableType,
                             kVectorSkippableText, SIZE_MAX),
        kC, kOk, "after MAC", "a skippable section after the MAC section");
    auto model = ModelOf(skippable);
    model.skippable_sections.push_back(model.skippable_sections[0]);
    add("skippable-repeated.hlt", WithModel(skippable, model), kC, kOk, "out of order or repeated",
        "the same skippable section twice");
  }
  return v;
}

Result<std::string> Describe(const CheckpointReader& r) {
  std::ostringstream o;
  const Metadata& m = r.metadata();
  o << "format " << r.format_major() << "." << r.format_minor() << "\n";
  o << "file_size " << r.file_size() << "\n";
  o << "vmm_kind " << VmmKindName(m.vmm_kind) << "\n";
  o << "machine_type \"" << m.machine_type << "\"\ncreator \"" << m.creator << "\"\n";
  o << "created_unix_ns " << m.created_unix_ns << "\n";
  o << "vm_uuid";
  for (uint8_t b : m.vm_uuid) o << ' ' << int(b);
  o << "\n";
  for (const auto& reg : r.regions()) {
    o << "region \"" << reg.name << "\" base " << fmt::format("{:#x}", reg.guest_phys_base) << " size " << reg.size
      << " host_page_size " << reg.host_page_size << " first_page " << reg.first_page << "\n";
  }
  std::vector<uint8_t> page(kPage);
  for (uint64_t g = 0; g < r.total_pages(); ++g) {
    PageLocation loc = r.Locate(g);
    o << "page " << g << " " << PageKindName(loc.kind);
    if (loc.kind == PageKind::kStored) {
      HLT_RETURN_IF_ERROR(r.ReadPage(g, page));
      o << " block " << loc.block << " slot " << loc.slot_in_block << " xxh3 " << fmt::format("{:#x}", codec::Xxh3_64(page, 0));
    }
    o << "\n";
  }
  for (size_t b = 0; b < r.blocks().size(); ++b) {
    const BlockInfo& bl = r.blocks()[b];
    o << "block " << b << " offset " << bl.offset << " stored " << bl.stored_length << " pages " << bl.page_count
      << " flags " << bl.flags << "\n";
  }
  for (size_t i = 0; i < r.blobs().size(); ++i) {
    HLT_ASSIGN_OR_RETURN(auto data, r.ReadBlob(uint32_t(i)));
    o << "blob \"" << r.blobs()[i].name << "\" raw " << data.size() << " stored " << r.blobs()[i].stored_length
      << " xxh3 " << fmt::format("{:#x}", codec::Xxh3_64(data, 0)) << "\n";
  }
  o << "restore_order";
  for (uint32_t b : r.restore_order()) o << ' ' << b;
  o << "\nworking_set_blocks " << r.working_set_blocks() << "\n";
  o << "dictionary_bytes " << r.dictionary_size() << "\n";
  o << "authenticated " << (r.authenticated() ? "yes" : "no") << "\n";
  return o.str();
}

}  // namespace halite::vectors
