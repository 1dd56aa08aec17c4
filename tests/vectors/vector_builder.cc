#include "vectors/vector_builder.h"

#include <cstring>
#include <sstream>

#include "codec/hashing.h"
#include "format/byte_order.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/checkpoint_writer.h"
#include "support/synthetic_memory.h"

namespace halite::vectors {
namespace {

constexpr size_t kPage = 4096;
const FileId kVectorFileId = {0x48, 0x4c, 0x54, 0x2d, 0x76, 0x65, 0x63, 0x74,
                              0x6f, 0x72, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x31};

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
std::vector<uint8_t> WithIndex(const std::vector<uint8_t>& f, std::vector<uint8_t> index) {
  Parts p = Split(f);
  std::vector<uint8_t> out(f.begin(), f.begin() + long(p.footer.index_offset));
  out.insert(out.end(), index.begin(), index.end());
  p.footer.index_length = index.size();
  p.footer.file_size = out.size() + 64;
  p.footer.index_checksum = codec::Xxh3_64(index, format::FileSeed(p.footer.file_id));
  auto fb = format::EncodeFooter(p.footer);
  out.insert(out.end(), fb.begin(), fb.end());
  return out;
}

// Offset of a section's body inside the index.
size_t SectionBody(const std::vector<uint8_t>& index, format::SectionType type) {
  size_t at = 0;
  while (at + 16 <= index.size()) {
    uint32_t t = format::LoadLe32(&index[at]);
    uint64_t len = format::LoadLe64(&index[at + 8]);
    if (t == uint32_t(type)) return at + 16;
    at += 16 + ((len + 7) / 8) * 8;
  }
  return SIZE_MAX;
}

std::vector<uint8_t> RewriteHeader(std::vector<uint8_t> f, uint16_t minor, uint16_t major) {
  format::Header h;
  h.major = major;
  h.minor = minor;
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
  return out;
}

Result<std::vector<InvalidVector>> BuildInvalidVectors(const std::vector<ValidVector>& valid) {
  const std::vector<uint8_t>& m = valid[0].bytes;  // minimal.hlt
  const std::vector<uint8_t>& multi = valid[1].bytes;
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
  add("version-1.1.hlt", RewriteHeader(m, 1, 1), StatusCode::kUnsupported, kOk, "format version 1.1",
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
    o << "region \"" << reg.name << "\" base " << format::Hex(reg.guest_phys_base) << " size " << reg.size
      << " host_page_size " << reg.host_page_size << " first_page " << reg.first_page << "\n";
  }
  std::vector<uint8_t> page(kPage);
  for (uint64_t g = 0; g < r.total_pages(); ++g) {
    PageLocation loc = r.Locate(g);
    o << "page " << g << " " << PageKindName(loc.kind);
    if (loc.kind == PageKind::kStored) {
      HLT_RETURN_IF_ERROR(r.ReadPage(g, page));
      o << " block " << loc.block << " slot " << loc.slot_in_block << " xxh64 " << format::Hex(codec::Xxh3_64(page, 0));
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
      << " xxh64 " << format::Hex(codec::Xxh3_64(data, 0)) << "\n";
  }
  o << "restore_order";
  for (uint32_t b : r.restore_order()) o << ' ' << b;
  o << "\nworking_set_blocks " << r.working_set_blocks() << "\n";
  o << "dictionary_bytes " << r.dictionary_size() << "\n";
  o << "authenticated " << (r.authenticated() ? "yes" : "no") << "\n";
  return o.str();
}

}  // namespace halite::vectors
