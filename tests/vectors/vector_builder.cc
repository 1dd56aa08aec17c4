#include "vectors/vector_builder.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "codec/hashing.h"
#include "halite/bytes.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "format/integrity_checks.h"
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
  o.frame_pages = 0;  // one frame a block, as the vectors before 1.3 were written; framed-blocks.hlt sets it
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

// packed-page-map: 512 pages, as a mostly idle guest's memory looks to the page map: 48 distinct pages stored in
// page order, one duplicate, then zero pages, then absent ones. The plain map would be 2048 bytes; packed (5.3, 1.6)
// it is a few dozen.
Status FillPackedPageMap(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 512 * kPage));
  testing::SyntheticMemory mem(13);
  std::vector<uint8_t> buf(kPage);
  for (uint64_t p = 0; p < 48; ++p) {
    mem.MakePage(p % 2 ? testing::PageFlavor::kText : testing::PageFlavor::kPointers, buf.data());
    buf[0] = uint8_t(p);  // no duplicates among these
    HLT_RETURN_IF_ERROR(w.PutPage(r, p, buf));
  }
  HLT_RETURN_IF_ERROR(w.PutPage(r, 48, Page(testing::PageFlavor::kText, 1)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 49, Page(testing::PageFlavor::kText, 1)));  // a duplicate of page 48
  HLT_RETURN_IF_ERROR(w.PutZeroPages(r, 50, 400));
  return Status::Ok();  // pages 450..511 absent
}

// --- invalid vectors: patches of a valid file, re-checksummed where the point is a deeper rule ---

struct Parts {
  format::Footer footer;
  std::vector<uint8_t> index;
};

Parts Split(const std::vector<uint8_t>& f) {
  Parts p;
  p.footer.index_offset = halite::LoadLe64(&f[f.size() - 64]);
  p.footer.index_length = halite::LoadLe64(&f[f.size() - 56]);
  p.footer.file_size = halite::LoadLe64(&f[f.size() - 48]);
  std::memcpy(p.footer.file_id.data(), &f[f.size() - 40], 16);
  p.footer.index_checksum = halite::LoadLe64(&f[f.size() - 24]);
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
    uint64_t len = halite::LoadLe64(&index[at + 8]);
    size_t end = at + 16 + size_t((len + 7) / 8 * 8);
    out.push_back({halite::LoadLe32(&index[at]), std::vector<uint8_t>(index.begin() + long(at), index.begin() + long(end))});
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
  halite::StoreLe32(&bytes[0], type);
  halite::StoreLe64(&bytes[8], text.size());
  bytes.insert(bytes.end(), text.begin(), text.end());
  bytes.resize(16 + (text.size() + 7) / 8 * 8, 0);
  sections.insert(sections.begin() + long(std::min(before, sections.size())), StoredSection{type, bytes});
  return WithIndex(f, JoinSections(sections));
}

// The decoded index of a valid file, to change one rule's worth and encode again.
format::IndexModel ModelOf(const std::vector<uint8_t>& f) {
  Parts p = Split(f);
  auto m = format::DecodeIndex(p.index, p.footer.index_offset, "vector");
  if (!m) return format::IndexModel{};
  m->MaterializePageMap();  // a child's sparse map, dense to edit; EncodeIndex writes it sparse again
  return std::move(*m);
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
    halite::StoreLe32(le, content_size);
    f.insert(f.end(), le, le + 4);
  }
  uint32_t block_header = 1u | (1u << 1) | (content_size << 3);  // Last_Block, RLE, Block_Size
  f.push_back(uint8_t(block_header));
  f.push_back(uint8_t(block_header >> 8));
  f.push_back(uint8_t(block_header >> 16));
  f.push_back('A');
  return f;
}

// A hand-made zstd frame (RFC 8878) of one Raw block holding `content`: never shorter than its content.
std::vector<uint8_t> ZstdRawFrame(const std::vector<uint8_t>& content) {
  std::vector<uint8_t> f = {0x28, 0xB5, 0x2F, 0xFD, uint8_t((2u << 6) | (1u << 5))};  // 4-byte FCS, Single_Segment
  uint8_t le[4];
  StoreLe32(le, uint32_t(content.size()));
  f.insert(f.end(), le, le + 4);
  uint32_t block_header = 1u | (uint32_t(content.size()) << 3);  // Last_Block, Raw, Block_Size
  f.push_back(uint8_t(block_header));
  f.push_back(uint8_t(block_header >> 8));
  f.push_back(uint8_t(block_header >> 16));
  f.insert(f.end(), content.begin(), content.end());
  return f;
}

// `f` with its PAGE_MAP section stored with `flags` and `body` (index checksum and footer recomputed).
std::vector<uint8_t> WithPageMapSection(const std::vector<uint8_t>& f, uint32_t flags, const std::vector<uint8_t>& body) {
  auto sections = SplitSections(Split(f).index);
  for (auto& s : sections) {
    if (s.type != uint32_t(format::SectionType::kPageMap)) continue;
    s.bytes.assign(16, 0);
    StoreLe32(&s.bytes[0], s.type);
    StoreLe32(&s.bytes[4], flags);
    StoreLe64(&s.bytes[8], body.size());
    s.bytes.insert(s.bytes.end(), body.begin(), body.end());
    s.bytes.resize(16 + (body.size() + 7) / 8 * 8, 0);
  }
  return WithIndex(f, JoinSections(sections));
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

  // 5.4: frames cut into zstd blocks of 4 pages (a reader may decode them piece by piece); 16-page blocks.
  o = DeterministicOptions();
  o.block_pages = 16;
  o.zstd_block_pages = 4;
  o.dictionary = DictionaryMode::kOff;
  HLT_ASSIGN_OR_RETURN(auto cut, Build("cut-frames.hlt", o, FillDictionary));
  out.push_back(std::move(cut));

  // 5.4, since 1.3: 16-page blocks stored as independent frames of 4 pages (FRAMED), each cut every 2 pages.
  o = DeterministicOptions();
  o.block_pages = 16;
  o.frame_pages = 4;
  o.zstd_block_pages = 2;
  HLT_ASSIGN_OR_RETURN(auto framed, Build("framed-blocks.hlt", o, FillDictionary));
  out.push_back(std::move(framed));

  // Since 1.4: the writer's defaults choose frames and dictionary from a sample and record how (CODING, 5.12).
  o = DeterministicOptions();
  o.block_pages = 8;
  o.frame_pages = WriterOptions::kFramePagesAuto;
  o.dictionary = DictionaryMode::kAuto;
  HLT_ASSIGN_OR_RETURN(auto coding, Build("coding-record.hlt", o, FillDictionary));
  out.push_back(std::move(coding));

  // Since 1.6: a page map of runs (stored pages in page order, zero pages, absent pages), PACKED (5.3).
  o = DeterministicOptions();
  o.block_pages = 16;
  HLT_ASSIGN_OR_RETURN(auto packed, Build("packed-page-map.hlt", o, FillPackedPageMap));
  out.push_back(std::move(packed));
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
  // Named for what it is, not for the number: each new minor moves it one up.
  const uint16_t newer = format::kFormatMinor + 1;
  add("version-newer-minor.hlt", RewriteHeader(m, newer, 1), StatusCode::kUnsupported, kOk,
      "format version 1." + std::to_string(newer),
      "a minor version newer than this reader's (1." + std::to_string(newer) +
          ", re-checksummed): unsupported, not corrupt");
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
    halite::StoreLe64(&idx[body + 8 + 8], 1ull << 60);  // region size
    add("region-2e60.hlt", WithIndex(m, idx), kC, kOk, "more than 2^31 pages",
        "a region claiming 2^60 bytes: rejected before allocating");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kBlocks);
    halite::StoreLe32(&idx[body + 8 + 12], 0xffffffffu);  // block 0 page_count
    add("block-2e32-pages.hlt", WithIndex(m, idx), kC, kOk, "page_count 4294967295", "a block claiming 2^32-1 pages");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kPageMap);
    halite::StoreLe32(&idx[body + 4 * 5], 1000);  // page 5 -> slot 998
    add("slot-out-of-range.hlt", WithIndex(m, idx), kC, kOk, "references slot 998", "a page pointing past the last slot");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kPageMap);
    halite::StoreLe32(&idx[body + 4 * 5], halite::LoadLe32(&idx[body + 4 * 4]));  // page 5 -> page 4's slot
    add("slot-unreferenced.hlt", WithIndex(m, idx), kC, kOk, "is referenced by no page",
        "a stored slot no page uses (unchecked bytes)");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kBlocks);
    halite::StoreLe64(&idx[body + 8], 65);  // block 0 offset
    add("block-gap.hlt", WithIndex(m, idx), kC, kOk, "payloads are contiguous", "block 0 not at offset 64");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kRestoreOrder);
    halite::StoreLe32(&idx[body + 8], halite::LoadLe32(&idx[body + 12]));  // duplicate entry
    add("order-not-permutation.hlt", WithIndex(m, idx), kC, kOk, "permutation", "restore order repeats a block");
  }
  {
    Parts p = Split(multi);
    auto idx = p.index;
    size_t body = SectionBody(idx, format::SectionType::kBlocks);
    halite::StoreLe32(&idx[body + 8 + 16], halite::LoadLe32(&idx[body + 8 + 16]) ^ format::kBlockHot);
    add("hot-flag-mismatch.hlt", WithIndex(multi, idx), kC, kOk, "HOT flag disagrees",
        "a block's HOT flag differs from the working set");
  }
  {
    Parts p = Split(m);
    auto idx = p.index;
    idx[0] = 10;  // first section type
    add("unknown-section.hlt", WithIndex(m, idx), kC, kOk, "unknown section type 10", "an unknown section type");
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
  // --- blocks of independent frames (5.4, FRAMED, since 1.3); frames hand-made, checksums recomputed ---
  {
    auto [block, raw] = FirstCompressedBlock(m);
    const uint32_t framed = format::kBlockCompressed | format::kBlockFramed;
    auto frames = [](std::initializer_list<std::vector<uint8_t>> parts) {
      std::vector<uint8_t> f;
      for (const auto& p : parts) f.insert(f.end(), p.begin(), p.end());
      return f;
    };
    const auto page = ZstdRleFrame(uint32_t(kPage), true, 0);
    add("framed-flag-on-raw-block.hlt",
        RewriteHeader(WithBlockPayload(m, block, std::vector<uint8_t>(raw, 0x41), format::kBlockFramed), 3, 1), kC, kOk,
        "FRAMED flag on an uncompressed block", "a raw (not COMPRESSED) block flagged FRAMED");
    add("framed-in-version-1.2.hlt", RewriteHeader(WithBlockPayload(m, block, frames({page, page}), framed), 2, 1), kC,
        kOk, "format version 1.2 but the index uses version 1.3 features",
        "a FRAMED block in a file that declares 1.2");
    add("framed-one-frame.hlt", RewriteHeader(WithBlockPayload(m, block, ZstdRleFrame(raw, true, 0), framed), 3, 1), kOk,
        kC, "holds 1 frame (expected at least 2)", "a FRAMED block whose payload is a single frame");
    add("framed-partial-page.hlt",
        RewriteHeader(WithBlockPayload(m, block,
                                       frames({ZstdRleFrame(uint32_t(kPage) - 1, true, 0),
                                               ZstdRleFrame(uint32_t(kPage) + 1, true, 0)}),
                                       framed),
                      3, 1),
        kOk, kC, "declares 4095 bytes (expected a non-zero multiple of 4096",
        "frames of 4095 and 4097 bytes: a frame must hold whole pages");
    add("framed-extra-frame.hlt",
        RewriteHeader(WithBlockPayload(m, block, frames({page, page, page}), framed), 3, 1), kOk, kC,
        "frame 2 (payload byte 26): more frames than pages", "three one-page frames in a two-page block");
    add("framed-short.hlt",
        RewriteHeader(WithBlockPayload(m, block, frames({page, ZstdRleFrame(uint32_t(kPage), false, 0)}), framed), 3, 1),
        kOk, kC, "frame 1 (payload byte 13) does not declare its content size",
        "the second frame does not declare its content size");
    add("framed-dictionary-id-without-flag.hlt",
        RewriteHeader(WithBlockPayload(m, block, frames({page, ZstdRleFrame(uint32_t(kPage), true, 42)}), framed), 3,
                      1),
        kOk, kC, "needs a dictionary but none applies", "a frame naming dictionary 42 in a block without DICTIONARY");
  }
  // --- blocks coded against the parent (5.4, BASED, since 1.4): rules of one file ---
  {
    auto with_flags = [](const std::vector<uint8_t>& f, uint32_t block, uint32_t add, uint32_t base_page) {
      auto model = ModelOf(f);
      model.blocks[block].flags |= add;
      model.blocks[block].base_page = base_page;
      return RewriteHeader(WithModel(f, model), format::kFormatMinorBasedBlocks, 1, model.mac.present ? 1 : 0);
    };
    auto first_with = [](const std::vector<uint8_t>& f, auto pred) {
      auto model = ModelOf(f);
      for (uint32_t b = 0; b < model.blocks.size(); ++b) {
        if (pred(model.blocks[b])) return b;
      }
      return uint32_t(0);
    };
    const uint32_t compressed = first_with(m, [](const BlockInfo& b) { return b.compressed(); });
    add("based-without-parent.hlt", with_flags(m, compressed, format::kBlockBased, 0), kC, kOk,
        "BASED flag in a file without PARENT", "a BASED block in a full checkpoint");
    auto [block, raw] = FirstCompressedBlock(m);
    add("based-on-raw-block.hlt",
        RewriteHeader(WithBlockPayload(m, block, std::vector<uint8_t>(raw, 0x41), format::kBlockBased), 4, 1), kC, kOk,
        "BASED flag on an uncompressed block", "a raw (not COMPRESSED) block flagged BASED");
    add("based-with-dictionary.hlt",
        with_flags(dict, first_with(dict, [](const BlockInfo& b) { return b.uses_dictionary(); }), format::kBlockBased,
                   0),
        kC, kOk, "BASED and DICTIONARY on one block", "a block flagged both BASED and DICTIONARY");
    add("based-hot.hlt",
        with_flags(multi, first_with(multi, [](const BlockInfo& b) { return b.hot() && b.compressed(); }),
                   format::kBlockBased, 0),
        kC, kOk, "BASED flag on a HOT block", "a HOT block flagged BASED (a BASED block is read with its group)");
    {
      Parts p = Split(m);
      auto idx = p.index;
      halite::StoreLe32(&idx[SectionBody(idx, format::SectionType::kBlocks) + 8 + 32 * compressed + 20], 1);
      add("base-page-without-based.hlt", WithIndex(m, idx), kC, kOk, "base_page is not zero on a block without BASED",
          "base_page set on a block that is not BASED (the field was reserved before 1.4)");
    }
  }
  // --- the CODING section (5.12, skippable, since 1.4): its own rules, for a reader that knows it ---
  {
    const std::vector<uint8_t>& coded = valid[8].bytes;  // coding-record.hlt
    auto patched = [&](auto change) {
      Parts p = Split(coded);
      auto idx = p.index;
      change(idx, testing::FindSectionBody(idx, format::kCodingSectionType));
      return WithIndex(coded, idx);
    };
    add("coding-reserved-nonzero.hlt", patched([](auto& idx, size_t body) { idx[body + 20] = 1; }), kC, kOk,
        "CODING at offset", "the CODING section's reserved field set");
    add("coding-trial-count.hlt",
        patched([](auto& idx, size_t body) { halite::StoreLe32(&idx[body + 4], halite::LoadLe32(&idx[body + 4]) - 1); }),
        kC, kOk, "(expected 32 + 24 x", "a trial_count one less than the entries present");
    add("coding-used-over-tried.hlt", patched([](auto& idx, size_t body) { halite::StoreLe32(&idx[body + 16], 1); }),
        kC, kOk, "base_groups_used 1 exceeds base_groups_tried 0", "more groups used than tried");
  }
  // --- the PACKED PAGE_MAP (5.3, since 1.6) ---
  {
    const std::vector<uint8_t>& packed = valid[9].bytes;
    const uint32_t kPacked = format::kSectionFlagPacked;
    add("packed-page-map-in-version-1.5.hlt", RewriteHeader(packed, 5, 1), kC, kOk,
        "format version 1.5 but the index uses version 1.6 features (a packed PAGE_MAP)",
        "a PACKED PAGE_MAP in a file that declares 1.5");
    add("packed-page-map-wrong-size.hlt", WithPageMapSection(packed, kPacked, ZstdRleFrame(4 * 511, true, 0)), kC,
        kOk, "packed frame declares 2044 bytes (expected 2048", "a packed frame one page short of the map");
    add("packed-page-map-not-shorter.hlt",
        WithPageMapSection(packed, kPacked, ZstdRawFrame(std::vector<uint8_t>(4 * 512, 0))), kC, kOk,
        "is not shorter than the 2048 bytes it holds", "a packed frame (one Raw block) longer than the plain map");
    add("packed-page-map-bad-slot.hlt", WithPageMapSection(packed, kPacked, ZstdRleFrame(4 * 512, true, 0)), kC,
        kOk, "references slot", "a packed map that decodes (running sums of 0x41414141) to slots past the last");
    add("packed-page-map-dictionary.hlt", WithPageMapSection(packed, kPacked, ZstdRleFrame(4 * 512, true, 7)), kC,
        kOk, "PAGE_MAP at offset", "a packed frame that names a dictionary");
    add("packed-flag-on-blocks.hlt", [&] {
          Parts p = Split(packed);
          auto idx = p.index;
          size_t body = SectionBody(idx, format::SectionType::kBlocks);
          StoreLe32(&idx[body - 12], kPacked);
          return WithIndex(packed, idx);
        }(),
        kC, kOk, "reserved section flags 0x4", "the PACKED flag on BLOCKS");
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

// --- incremental chains (format-spec 12) ---
namespace {

FileId ChainFileId(uint8_t tag, uint8_t n) {
  FileId id = kVectorFileId;
  id[14] = tag;
  id[15] = n;
  return id;
}

// Serves the chain files built so far to readers, as if they lay in one directory.
class ChainDir {
 public:
  void Add(const std::string& name, const std::vector<uint8_t>& bytes) { files_[name] = bytes; }
  const std::vector<uint8_t>& Get(const std::string& name) { return files_[name]; }
  ReaderOptions Options() {
    ReaderOptions o;
    o.open_parent = [this](const std::string& path) -> Result<std::unique_ptr<RandomAccessFile>> {
      auto it = files_.find(path);
      if (it == files_.end()) return Status::IoError(path + ": cannot open: no such file", 2);
      return NewMemoryFile(path, it->second);
    };
    return o;
  }
  Result<std::shared_ptr<const CheckpointReader>> Open(const std::string& name) {
    HLT_ASSIGN_OR_RETURN(auto r, CheckpointReader::Open(NewMemoryFile(name, Get(name)), Options()));
    return std::shared_ptr<const CheckpointReader>(std::move(r));
  }

 private:
  std::map<std::string, std::vector<uint8_t>> files_;
};

// chain-base: 8 pages of a region "ram": text, code, pointers, sparse, random, text, zero, absent.
Status FillChainBase(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 8 * kPage));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 0, Page(testing::PageFlavor::kText, 301)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 1, Page(testing::PageFlavor::kCode, 302)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 2, Page(testing::PageFlavor::kPointers, 303)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 3, Page(testing::PageFlavor::kSparse, 304)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 4, Page(testing::PageFlavor::kRandom, 305)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 5, Page(testing::PageFlavor::kText, 306)));
  HLT_RETURN_IF_ERROR(w.PutZeroPages(r, 6, 1));
  const uint8_t state[] = {'b', 'a', 's', 'e'};
  return w.AddBlob("state", state);
}

// chain-child: 10 pages; 0, 2, 4, 5 unchanged (IN_PARENT), 1 changed, 3 newly zero, 6 zero, 7 absent, 8 and 9
// beyond the parent's end.
Status FillChainChild(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 10 * kPage));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 0, Page(testing::PageFlavor::kText, 301)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 1, Page(testing::PageFlavor::kCode, 402)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 2, Page(testing::PageFlavor::kPointers, 303)));
  HLT_RETURN_IF_ERROR(w.PutZeroPages(r, 3, 1));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 4, Page(testing::PageFlavor::kRandom, 305)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 5, Page(testing::PageFlavor::kText, 306)));
  HLT_RETURN_IF_ERROR(w.PutZeroPages(r, 6, 1));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 8, Page(testing::PageFlavor::kText, 408)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 9, Page(testing::PageFlavor::kText, 301)));  // page 0's bytes, at a new number
  const uint8_t state[] = {'c', 'h', 'i', 'l', 'd'};
  return w.AddBlob("state", state);
}

// chain-grandchild: page 5 changed, page 8 unchanged (in chain-child), 0 (in chain-base, two levels down).
Status FillChainGrandchild(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 10 * kPage));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 0, Page(testing::PageFlavor::kText, 301)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 1, Page(testing::PageFlavor::kCode, 402)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 2, Page(testing::PageFlavor::kPointers, 303)));
  HLT_RETURN_IF_ERROR(w.PutZeroPages(r, 3, 1));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 4, Page(testing::PageFlavor::kRandom, 305)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 5, Page(testing::PageFlavor::kCode, 505)));
  HLT_RETURN_IF_ERROR(w.PutZeroPages(r, 6, 1));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 8, Page(testing::PageFlavor::kText, 408)));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 9, Page(testing::PageFlavor::kText, 301)));
  return Status::Ok();
}

// deep-NN: two pages; page 0 changes at every level, page 1 is deep-00's all the way down.
auto FillDeep(int level) {
  return [level](CheckpointWriter& w) -> Status {
    HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 2 * kPage));
    HLT_RETURN_IF_ERROR(w.PutPage(r, 0, Page(testing::PageFlavor::kText, 600 + uint64_t(level))));
    return w.PutPage(r, 1, Page(testing::PageFlavor::kCode, 600));
  };
}

// based-*: 8 pages in one block, then children whose pages are partly rewritten (8 bytes in every 64, as a guest
// updating fields of its structures does), which a writer codes against the parent (5.4 BASED, since 1.4).
std::vector<uint8_t> PartlyRewritten(std::vector<uint8_t> page, uint64_t seed) {
  for (size_t line = 0; line < kPage; line += 64) {
    const uint64_t v = (seed + line) * 0x9E3779B97F4A7C15ull;
    std::memcpy(&page[line + 8 * (seed % 8)], &v, 8);
  }
  return page;
}

std::vector<uint8_t> BasedBasePage(uint64_t p) {
  const testing::PageFlavor flavors[] = {testing::PageFlavor::kText, testing::PageFlavor::kCode,
                                         testing::PageFlavor::kPointers, testing::PageFlavor::kSparse};
  return Page(flavors[p % 4], 700 + p);
}

// based-base: pages 0..5 and 7 stored (text, code, pointers, sparse, ...), page 6 zero.
Status FillBasedBase(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 8 * kPage));
  for (uint64_t p = 0; p < 8; ++p) {
    HLT_RETURN_IF_ERROR(p == 6 ? w.PutZeroPages(r, p, 1) : w.PutPage(r, p, BasedBasePage(p)));
  }
  return Status::Ok();
}

// The based chains' pages: `rewritten` pages partly rewritten once per entry (a page listed twice was rewritten in
// two saves), `replaced` pages given new random content, the rest as based-base has them.
auto FillBased(std::vector<uint64_t> rewritten, std::vector<uint64_t> replaced) {
  return [rewritten, replaced](CheckpointWriter& w) -> Status {
    HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 8 * kPage));
    for (uint64_t p = 0; p < 8; ++p) {
      if (p == 6) {
        HLT_RETURN_IF_ERROR(w.PutZeroPages(r, p, 1));
        continue;
      }
      std::vector<uint8_t> page = BasedBasePage(p);
      uint64_t round = 0;
      for (uint64_t q : rewritten) {
        if (q == p) page = PartlyRewritten(std::move(page), p * 10 + round++);
      }
      if (std::find(replaced.begin(), replaced.end(), p) != replaced.end()) page = Page(testing::PageFlavor::kRandom, 800 + p);
      HLT_RETURN_IF_ERROR(w.PutPage(r, p, page));
    }
    return Status::Ok();
  };
}

// based-group-base: a block of 4096 pages (distinct, small to store: a counter in each) and one of 2.
Status FillGroupBase(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 4098 * kPage));
  std::vector<uint8_t> page(kPage, 0x20);
  for (uint64_t p = 0; p < 4096; ++p) {
    std::memcpy(page.data(), &p, 8);
    HLT_RETURN_IF_ERROR(w.PutPage(r, p, page));
  }
  HLT_RETURN_IF_ERROR(w.PutPage(r, 4096, Page(testing::PageFlavor::kText, 901)));
  return w.PutPage(r, 4097, Page(testing::PageFlavor::kText, 902));
}

// based-group-child: page 4096 partly rewritten: based on the 2-page block.
Status FillGroupChild(CheckpointWriter& w) {
  HLT_ASSIGN_OR_RETURN(uint32_t r, w.AddRegion("ram", 0, 4098 * kPage));
  HLT_RETURN_IF_ERROR(w.DeclareInParent(r, 0, 4096));
  HLT_RETURN_IF_ERROR(w.PutPage(r, 4096, PartlyRewritten(Page(testing::PageFlavor::kText, 901), 3)));
  return w.PutPage(r, 4097, Page(testing::PageFlavor::kText, 902));
}

format::IndexFingerprint FingerprintOf(const std::vector<uint8_t>& f) {
  Parts p = Split(f);
  return format::ComputeIndexFingerprint(std::span<const uint8_t>(f.data(), format::kHeaderSize), p.index,
                                         std::span<const uint8_t>(f.data() + f.size() - format::kFooterSize,
                                                                  format::kFooterSize));
}

}  // namespace

namespace {

using KeepValid = std::function<void(const std::string&, std::vector<uint8_t>, bool, std::string)>;
using AddInvalid = std::function<void(std::string, std::vector<uint8_t>, StatusCode, StatusCode, std::string,
                                      std::string, std::string)>;
using ChildOptions =
    std::function<Result<WriterOptions>(uint8_t, uint8_t, const std::string&, const std::string&)>;

// The BASED block of a based chain vector (its only one).
uint32_t BasedBlock(const format::IndexModel& m) {
  for (uint32_t b = 0; b < m.blocks.size(); ++b) {
    if (m.blocks[b].based()) return b;
  }
  return 0;
}

// Format 1.4: children coded against their parents (5.4 BASED), and the block groups a reader reads them in (12).
Status AddBasedChains(ChainDir& dir, const KeepValid& keep_valid, const AddInvalid& add_invalid,
                      const ChildOptions& child_options) {
  WriterOptions o = DeterministicOptions();
  o.file_id = ChainFileId('b', 0);
  o.block_pages = 8;
  HLT_ASSIGN_OR_RETURN(auto base, Build("based-base.hlt", o, FillBasedBase));
  keep_valid(base.name, std::move(base.bytes), false, "8 pages in one block (page 6 zero): the based chains' parent");
  auto based_child = [&](uint8_t n, const std::string& parent, const std::string& name, auto fill)
      -> Result<ValidVector> {
    HLT_ASSIGN_OR_RETURN(WriterOptions co, child_options('b', n, parent, parent));
    co.code_against_parent = true;
    return Build(name, co, fill);
  };
  HLT_ASSIGN_OR_RETURN(auto child, based_child(1, "based-base.hlt", "based-child.hlt", FillBased({1, 5}, {})));
  keep_valid(child.name, child.bytes, true,
             "format 1.4: pages 1 and 5 partly rewritten (8 bytes in every 64), in one BASED block coded against "
             "based-base.hlt's block: a group of two blocks");
  HLT_ASSIGN_OR_RETURN(auto grandchild,
                       based_child(2, "based-child.hlt", "based-grandchild.hlt", FillBased({1, 5, 2, 5}, {})));
  keep_valid(grandchild.name, std::move(grandchild.bytes), true,
             "page 2 partly rewritten, page 5 again: BASED on based-child.hlt's group, which becomes a group of "
             "three blocks from three files");
  HLT_ASSIGN_OR_RETURN(auto replaced,
                       based_child(3, "based-child.hlt", "based-replaced.hlt", FillBased({1, 5}, {1, 5})));
  keep_valid(replaced.name, std::move(replaced.bytes), true,
             "pages 1 and 5 replaced by new content: based-child.hlt's BASED block holds no page of this view, so "
             "the group is read without it (cut after its last block holding a page)");
  {
    auto f = RewriteHeader(child.bytes, 3, 1);
    testing::ResealAllChecksums(f);
    add_invalid("based-in-version-1.3.hlt", std::move(f), StatusCode::kCorrupt, StatusCode::kOk,
                "format version 1.3 but the index uses version 1.4 features (blocks coded against the parent)", "",
                "a BASED block in a file that declares 1.3");
  }
  {
    auto model = ModelOf(child.bytes);
    model.blocks[BasedBlock(model)].base_page = 6;
    add_invalid("based-base-page-zero.hlt", WithModel(child.bytes, model), StatusCode::kCorrupt, StatusCode::kOk,
                "base_page 6 is zero in the parent's view", "", "a BASED block whose base_page is a zero page");
    model.blocks[BasedBlock(model)].base_page = 8;
    add_invalid("based-base-page-past-parent.hlt", WithModel(child.bytes, model), StatusCode::kCorrupt,
                StatusCode::kOk, "base_page 8 is past the parent's 8 pages", "",
                "a BASED block whose base_page is past the parent's pages");
  }
  o = DeterministicOptions();
  o.file_id = ChainFileId('b', 10);
  o.block_pages = 4096;
  HLT_ASSIGN_OR_RETURN(auto group_base, Build("based-group-base.hlt", o, FillGroupBase));
  keep_valid(group_base.name, std::move(group_base.bytes), false, "a block of 4096 pages and one of 2");
  HLT_ASSIGN_OR_RETURN(auto group_child, based_child(11, "based-group-base.hlt", "based-group-child.hlt", FillGroupChild));
  keep_valid(group_child.name, group_child.bytes, false, "page 4096 partly rewritten: BASED on the 2-page block");
  {
    auto model = ModelOf(group_child.bytes);
    model.blocks[BasedBlock(model)].base_page = 0;
    add_invalid("based-group-too-large.hlt", WithModel(group_child.bytes, model), StatusCode::kCorrupt,
                StatusCode::kOk, "would then hold 4097 pages (at most 4096)", "",
                "a BASED block on the 4096-page block: a group of 4097 pages");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<ChainVector>> BuildChainVectors() {
  std::vector<ChainVector> out;
  ChainDir dir;
  auto keep_valid = [&](const std::string& name, std::vector<uint8_t> bytes, bool top, std::string why) {
    dir.Add(name, bytes);
    ChainVector v;
    v.name = name;
    v.bytes = std::move(bytes);
    v.top = top;
    v.why = std::move(why);
    out.push_back(std::move(v));
  };
  auto add_invalid = [&](std::string name, std::vector<uint8_t> bytes, StatusCode open, StatusCode verify,
                         std::string message, std::string also, std::string why) {
    dir.Add(name, bytes);
    ChainVector v{std::move(name), std::move(bytes), false, false, open, verify, std::move(message), std::move(also),
                  std::move(why)};
    out.push_back(std::move(v));
  };
  auto child_options = [&](uint8_t tag, uint8_t n, const std::string& parent, const std::string& hint)
      -> Result<WriterOptions> {
    WriterOptions o = DeterministicOptions();
    o.file_id = ChainFileId(tag, n);
    o.block_pages = 2;
    o.parent_rewrite_fraction = 2;  // every equal page a reference: the vectors show IN_PARENT pages
    o.code_against_parent = false;  // changed pages coded on their own (1.2); the based-* vectors code against it
    HLT_ASSIGN_OR_RETURN(o.parent, dir.Open(parent));
    o.parent_path_hint = hint;
    return o;
  };

  WriterOptions o = DeterministicOptions();
  o.file_id = ChainFileId('c', 0);
  o.block_pages = 2;
  o.page_hashes = true;
  HLT_ASSIGN_OR_RETURN(auto base, Build("chain-base.hlt", o, FillChainBase));
  keep_valid(base.name, std::move(base.bytes), true,
             "a full checkpoint with PAGE_HASHES (5.11), format 1.1: the parent");

  HLT_ASSIGN_OR_RETURN(o, child_options('c', 1, "chain-base.hlt", "chain-base.hlt"));
  o.page_hashes = true;
  HLT_ASSIGN_OR_RETURN(auto child, Build("chain-child.hlt", o, FillChainChild));
  keep_valid(child.name, child.bytes, true,
             "child of chain-base.hlt: unchanged pages IN_PARENT, one changed, one newly zero, two past the parent's "
             "end; PAGE_HASHES");

  HLT_ASSIGN_OR_RETURN(o, child_options('c', 2, "chain-child.hlt", "chain-child.hlt"));
  HLT_ASSIGN_OR_RETURN(auto grandchild, Build("chain-grandchild.hlt", o, FillChainGrandchild));
  keep_valid(grandchild.name, grandchild.bytes, true,
             "child of chain-child.hlt (no PAGE_HASHES): pages resolved one and two levels down");

  // The depth limit: deep-16 has 16 parent links (the most a chain may have), deep-17 one more.
  o = DeterministicOptions();
  o.file_id = ChainFileId('d', 0);
  HLT_ASSIGN_OR_RETURN(auto deep0, Build("deep-00.hlt", o, FillDeep(0)));
  keep_valid(deep0.name, std::move(deep0.bytes), false, "the base of a chain of 16 links");
  std::vector<uint8_t> deep16;
  for (int level = 1; level <= 16; ++level) {
    std::string name = fmt::format("deep-{:02}.hlt", level), parent = fmt::format("deep-{:02}.hlt", level - 1);
    HLT_ASSIGN_OR_RETURN(o, child_options('d', uint8_t(level), parent, parent));
    HLT_ASSIGN_OR_RETURN(auto deep, Build(name, o, FillDeep(level)));
    if (level == 16) deep16 = deep.bytes;
    keep_valid(name, std::move(deep.bytes), level == 16,
               level == 16 ? "16 parent links: the deepest chain a reader opens; page 1 comes from deep-00.hlt"
                           : "one link of the deep chain");
  }
  {
    // Not writable by a conforming writer: deep-16's content with a PARENT section naming deep-16 itself as
    // parent at depth 17.
    auto model = ModelOf(deep16);
    model.parent->file_id = ChainFileId('d', 16);
    model.parent->fingerprint = FingerprintOf(deep16);
    model.parent->chain_depth = 17;
    model.parent->path_hint = "deep-16.hlt";
    auto f = WithModel(deep16, model);
    std::memcpy(&f[16], ChainFileId('d', 17).data(), 16);
    std::memcpy(&f[f.size() - 40], ChainFileId('d', 17).data(), 16);
    testing::ResealAllChecksums(f);
    add_invalid("deep-17.hlt", std::move(f), StatusCode::kCorrupt, StatusCode::kOk, "chain_depth 17 (expected 1..16",
                "deep-16.hlt", "17 parent links: over the limit of 16 (rejected before any parent is opened)");
  }

  // Missing and mismatched parents.
  {
    HLT_ASSIGN_OR_RETURN(o, child_options('x', 1, "chain-base.hlt", "chain-gone.hlt"));
    HLT_ASSIGN_OR_RETURN(auto f, Build("chain-missing-parent.hlt", o, FillChainChild));
    add_invalid(f.name, std::move(f.bytes), StatusCode::kIoError, StatusCode::kOk, "parent (path hint \"chain-gone.hlt\")",
                "chain-gone.hlt", "the parent is not where the path hint points (no such file): I/O error");
  }
  {
    HLT_ASSIGN_OR_RETURN(o, child_options('x', 2, "chain-base.hlt", "chain-child.hlt"));
    HLT_ASSIGN_OR_RETURN(auto f, Build("chain-wrong-file-id.hlt", o, FillChainChild));
    add_invalid(f.name, std::move(f.bytes), StatusCode::kCorrupt, StatusCode::kOk, "has file_id", "chain-child.hlt",
                "the path hint names another checkpoint (chain-child.hlt, not chain-base.hlt)");
  }
  {
    auto model = ModelOf(child.bytes);
    model.parent->fingerprint[0] ^= 1;
    auto f = WithModel(child.bytes, model);
    std::memcpy(&f[16], ChainFileId('x', 3).data(), 16);
    std::memcpy(&f[f.size() - 40], ChainFileId('x', 3).data(), 16);
    testing::ResealAllChecksums(f);
    add_invalid("chain-modified-parent.hlt", std::move(f), StatusCode::kCorrupt, StatusCode::kOk,
                "index fingerprint", "chain-base.hlt",
                "the parent's index differs from the one the child recorded (parent modified or replaced, same file_id)");
  }
  {
    auto model = ModelOf(child.bytes);
    model.page_map[9] = format::kPageMapInParent;
    add_invalid("chain-past-parent.hlt", WithModel(child.bytes, model), StatusCode::kCorrupt, StatusCode::kOk,
                "a page past the parent's end is IN_PARENT: the parent (\"chain-base.hlt\") has only 8 pages",
                "chain-base.hlt",
                "an IN_PARENT page past the parent's page count");
  }
  {
    // A cycle: cycle-a's parent is cycle-b, whose parent is cycle-a. cycle-b cannot record cycle-a's fingerprint
    // (it depends on its own), so it records zeros: opened from cycle-a the cycle is found first; opened from
    // cycle-b the fingerprint fails first.
    HLT_ASSIGN_OR_RETURN(o, child_options('y', 2, "chain-base.hlt", "chain-base.hlt"));
    HLT_ASSIGN_OR_RETURN(auto b, Build("cycle-b.hlt", o, FillChainChild));
    auto bm = ModelOf(b.bytes);
    bm.parent = format::ParentSection{ChainFileId('y', 1), {}, 10, 1, "cycle-a.hlt"};
    auto b_bytes = WithModel(b.bytes, bm);
    HLT_ASSIGN_OR_RETURN(o, child_options('y', 1, "chain-child.hlt", "chain-child.hlt"));
    HLT_ASSIGN_OR_RETURN(auto a, Build("cycle-a.hlt", o, FillChainGrandchild));
    auto am = ModelOf(a.bytes);
    am.parent = format::ParentSection{ChainFileId('y', 2), FingerprintOf(b_bytes), 10, 2, "cycle-b.hlt"};
    add_invalid("cycle-a.hlt", WithModel(a.bytes, am), StatusCode::kCorrupt, StatusCode::kOk,
                "is already in the chain above it: a cycle", "cycle-b.hlt",
                "cycle-a -> cycle-b -> cycle-a: the cycle is found by file_id before any fingerprint");
    add_invalid("cycle-b.hlt", b_bytes, StatusCode::kCorrupt, StatusCode::kOk, "index fingerprint", "cycle-a.hlt",
                "the other end of the cycle: its recorded fingerprint cannot match");
  }

  // Rules of one file (5.3, 5.10, 5.11), found before any parent is looked for.
  {
    auto model = ModelOf(child.bytes);
    model.parent.reset();
    add_invalid("in-parent-without-parent.hlt", WithModel(child.bytes, model), StatusCode::kCorrupt, StatusCode::kOk,
                "is IN_PARENT but the file has no PARENT section", "", "IN_PARENT pages, no PARENT section");
  }
  {
    auto model = ModelOf(dir.Get("chain-base.hlt"));
    model.parent = ModelOf(child.bytes).parent;
    auto f = RewriteHeader(WithModel(dir.Get("chain-base.hlt"), model), 2, 1);
    testing::ResealAllChecksums(f);
    add_invalid("parent-unused.hlt", std::move(f), StatusCode::kCorrupt, StatusCode::kOk,
                "present but no page is IN_PARENT", "", "a PARENT section no page uses");
  }
  {
    auto f = RewriteHeader(child.bytes, 1, 1);
    testing::ResealAllChecksums(f);
    add_invalid("parent-in-version-1.1.hlt", std::move(f), StatusCode::kCorrupt, StatusCode::kOk,
                "format version 1.1 but the index uses version 1.2 features (a PARENT section)", "",
                "a PARENT section in a file that declares 1.1");
  }
  {
    auto model = ModelOf(child.bytes);
    model.parent->file_id = ChainFileId('c', 1);
    add_invalid("parent-self.hlt", WithModel(child.bytes, model), StatusCode::kCorrupt, StatusCode::kOk,
                "a file cannot be its own parent", "", "parent_file_id is the file's own file_id");
  }
  {
    auto model = ModelOf(child.bytes);
    model.parent->path_hint = "/chain-base.hlt";
    add_invalid("parent-path-absolute.hlt", WithModel(child.bytes, model), StatusCode::kCorrupt, StatusCode::kOk,
                "path_hint is not a relative path", "", "an absolute path hint");
  }
  {
    auto model = ModelOf(child.bytes);
    model.parent->chain_depth = 2;
    add_invalid("parent-depth-mismatch.hlt", WithModel(child.bytes, model), StatusCode::kCorrupt, StatusCode::kOk,
                "has 0 parent links below it", "chain-base.hlt",
                "chain_depth 2 but the parent is a full checkpoint (expected 1)");
  }
  {
    auto model = ModelOf(dir.Get("chain-base.hlt"));
    model.page_hashes.pop_back();
    add_invalid("page-hashes-short.hlt", WithModel(dir.Get("chain-base.hlt"), model), StatusCode::kCorrupt,
                StatusCode::kOk, "PAGE_HASHES at offset", "", "PAGE_HASHES with one entry fewer than the stored slots");
  }
  {
    auto model = ModelOf(child.bytes);
    model.page_hashes[0] ^= 1;
    add_invalid("page-hashes-wrong.hlt", WithModel(child.bytes, model), StatusCode::kOk, StatusCode::kCorrupt,
                "PAGE_HASHES: slot 0", "", "a wrong hash for a stored page: opens, fails verify");
  }
  HLT_RETURN_IF_ERROR(AddBasedChains(dir, keep_valid, add_invalid, child_options));
  return out;
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
      << " flags " << bl.flags;
    if (bl.chain_level > 0) o << " level " << bl.chain_level;
    const std::vector<GroupPart> parts = r.GroupParts(uint32_t(b));
    if (parts.size() > 1) {  // a block group (since 1.4): each block's level and slots, B for BASED
      o << " group";
      for (const GroupPart& p : parts) o << ' ' << p.chain_level << ':' << p.first_slot << '+' << p.page_count << (p.based ? "B" : "");
    }
    o << "\n";
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
  if (const auto& c = r.coding()) {  // 5.12, printed only when present, so older descriptions stay as they were
    o << "coding frame_pages " << c->frame_pages << " sample_blocks " << c->sample_blocks << " sample_raw_bytes "
      << c->sample_raw_bytes << " base_groups " << c->base_groups_used << "/" << c->base_groups_tried << " trials";
    for (const auto& t : c->trials) o << ' ' << t.frame_pages << ':' << t.dictionary_bytes << ':' << t.sample_bytes << ':' << t.estimate;
    o << "\n";
  }
  o << "authenticated " << (r.authenticated() ? "yes" : "no") << "\n";
  if (r.encrypted()) {  // format 1.5 (section 13): printed only when used, so older descriptions stay as they were
    o << "encrypted key_id " << KeyIdHex(r.key_id()) << " cipher " << CipherName(r.cipher()) << "\n";
  }
  // Format 1.2 (section 12) and PAGE_HASHES (5.11): printed only when used, so older descriptions stay as they were.
  if (r.has_page_hashes()) {
    o << "page_hashes";
    for (uint64_t g = 0; g < r.total_pages(); ++g) {
      auto h = r.PageHash(g);
      o << ' ' << (h ? fmt::format("{:#x}", *h) : std::string("?"));
    }
    o << "\n";
  }
  if (r.chain().size() > 1) {
    for (size_t i = 0; i < r.chain().size(); ++i) {
      const ChainLevel& c = r.chain()[i];
      auto slash = c.name.rfind('/');
      o << "chain " << i << " \"" << (slash == std::string::npos ? c.name : c.name.substr(slash + 1)) << "\" depth "
        << c.chain_depth << " blocks " << c.blocks << " block_bytes " << c.block_bytes << " live_blocks "
        << c.live_blocks << " pages " << c.pages << " hint \"" << c.path_hint << "\"";
      if (c.based_blocks > 0) o << " based_blocks " << c.based_blocks;
      o << "\n";
    }
  }
  return o.str();
}

}  // namespace halite::vectors
