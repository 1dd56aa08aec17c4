// Resource limits (format-spec section 6): a hostile file cannot make the reader allocate more than the limits
// allow. Each hostile file is a valid small checkpoint whose index (or footer) was patched, with the index
// checksum and footer recomputed so the limit itself is what rejects it. The test binary replaces the global
// operator new and checks that no single allocation over 64 MiB is even attempted while opening and reading.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <new>

#include "codec/hashing.h"
#include "halite/bytes.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/format_constants.h"
#include "support/checksum_reseal.h"
#include "support/synthetic_memory.h"

// --- allocation watch ---

namespace {
std::atomic<size_t> g_largest_allocation{0};
void Note(size_t n) {
  size_t cur = g_largest_allocation.load(std::memory_order_relaxed);
  while (n > cur && !g_largest_allocation.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
}
void* Allocate(size_t n) {
  Note(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();  // operator new's contract; the library itself never catches it
}
void* AllocateAligned(size_t n, std::align_val_t a) {
  Note(n);
  size_t align = static_cast<size_t>(a);
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return Allocate(n); }
void* operator new[](size_t n) { return Allocate(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { Note(n); return std::malloc(n ? n : 1); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { Note(n); return std::malloc(n ? n : 1); }
void* operator new(size_t n, std::align_val_t a) { return AllocateAligned(n, a); }
void* operator new[](size_t n, std::align_val_t a) { return AllocateAligned(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

using namespace halite;

namespace {

constexpr size_t kAllocationLimit = 64 << 20;

// A valid small checkpoint: one region "ram" of 16 pages (some absent, some zero), blocks of 4 pages, one
// compressed blob.
const std::vector<uint8_t>& Valid() {
  static const std::vector<uint8_t> file = [] {
    WriterOptions o;
    o.block_pages = 4;
    o.threads = 1;
    o.dictionary = DictionaryMode::kOff;
    o.deterministic = true;
    o.file_id = FileId{9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7};
    std::vector<uint8_t> out;
    auto w = CheckpointWriter::Create(NewMemorySink("valid.hlt", &out), o);
    REQUIRE(w.has_value());
    auto r = (*w)->AddRegion("ram", 0, 16 * 4096);
    REQUIRE(r.has_value());
    auto mem = testing::SyntheticBytes(16 * 4096, 11);
    for (uint64_t p = 0; p < 16; ++p) {
      if (p == 3) continue;
      REQUIRE((*w)->PutPage(*r, p, std::span(mem).subspan(p * 4096, 4096)).ok());
    }
    std::vector<uint8_t> blob(5000, 'd');
    REQUIRE((*w)->AddBlob("dev", blob).ok());
    REQUIRE((*w)->Finish().has_value());
    return out;
  }();
  return file;
}

struct Parts {
  format::Footer footer;
  std::vector<uint8_t> index;
  format::IndexModel model;
};

Parts Split(const std::vector<uint8_t>& f) {
  auto footer = format::DecodeFooter(std::span(f).last(64), f.size(), "valid.hlt");
  REQUIRE(footer.has_value());
  Parts p;
  p.footer = *footer;
  p.index.assign(f.begin() + footer->index_offset, f.begin() + footer->index_offset + footer->index_length);
  auto m = format::DecodeIndex(p.index, footer->index_offset, "valid.hlt");
  REQUIRE(m.has_value());
  p.model = std::move(*m);
  return p;
}

// The valid file's payloads with `index` as its index, and a footer (index checksum included) to match.
std::vector<uint8_t> Reseal(std::span<const uint8_t> index) { return testing::ResealWithIndex(Valid(), index); }

// Where the body of section `type` starts inside the index.
size_t SectionBody(const std::vector<uint8_t>& index, format::SectionType type) {
  size_t at = testing::FindSectionBody(index, type);
  if (at == SIZE_MAX) FAIL("section not found");
  return at;
}

// Opens `file` from memory, reads everything it lets us read, and returns Open's error (or ok).
Status OpenAndReadAll(std::vector<uint8_t> file, size_t* largest) {
  g_largest_allocation = 0;
  Status result;
  {
    auto r = CheckpointReader::Open(NewMemoryFile("hostile.hlt", std::move(file)));
    if (!r) {
      result = r.error();
    } else {
      result = (*r)->VerifyAll();
    }
  }
  *largest = g_largest_allocation;
  return result;
}

void ExpectRejected(const std::vector<uint8_t>& file, const std::string& message) {
  size_t largest = 0;
  Status s = OpenAndReadAll(file, &largest);
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find(message) != std::string::npos);
  CHECK(largest < kAllocationLimit);
}

std::vector<uint8_t> WithModel(const std::function<void(format::IndexModel&)>& edit) {
  Parts p = Split(Valid());
  edit(p.model);
  return Reseal(format::EncodeIndex(p.model));
}

std::vector<uint8_t> WithIndexBytes(const std::function<void(std::vector<uint8_t>&)>& edit) {
  Parts p = Split(Valid());
  edit(p.index);
  return Reseal(p.index);
}

}  // namespace

TEST_CASE("limits: the unpatched file and an unchanged re-seal open and verify", "[limits]") {
  size_t largest = 0;
  CHECK(OpenAndReadAll(Valid(), &largest).ok());
  CHECK(largest < kAllocationLimit);
  CHECK(Reseal(Split(Valid()).index) == Valid());
  CHECK(OpenAndReadAll(WithModel([](format::IndexModel&) {}), &largest).ok());
}

TEST_CASE("limits: a region claiming 2^60 bytes", "[limits]") {
  ExpectRejected(WithModel([](format::IndexModel& m) { m.regions[0].size = 1ull << 60; }), "more than 2^31 pages");
}

TEST_CASE("limits: regions claiming 2^31 + 1 pages", "[limits]") {
  ExpectRejected(WithModel([](format::IndexModel& m) { m.regions[0].size = ((1ull << 31) + 1) * 4096; }),
                 "more than 2^31 pages");
  // Split over two regions, each under the limit alone.
  ExpectRejected(WithModel([](format::IndexModel& m) {
                   m.regions[0].size = (1ull << 30) * 4096;
                   Region second = m.regions[0];
                   second.name = "more";
                   second.guest_phys_base = 1ull << 50;
                   second.size = ((1ull << 30) + 1) * 4096;
                   m.regions.push_back(second);
                 }),
                 "more than 2^31 pages");
}

TEST_CASE("limits: a page map larger than the file", "[limits]") {
  // Exactly 2^31 pages is allowed by the limit; the 8 GiB page map it needs is not in the file.
  ExpectRejected(WithModel([](format::IndexModel& m) { m.regions[0].size = (1ull << 31) * 4096; }),
                 "PAGE_MAP at offset");
  // A page map section claiming more bytes than the index holds.
  ExpectRejected(WithIndexBytes([](std::vector<uint8_t>& idx) {
                   size_t body = SectionBody(idx, format::SectionType::kPageMap);
                   halite::StoreLe64(&idx[body - 8], 1ull << 33);
                 }),
                 "exceeds the");
}

TEST_CASE("limits: a block claiming 2^32 - 1 pages, or 4097", "[limits]") {
  ExpectRejected(WithModel([](format::IndexModel& m) { m.blocks[0].page_count = 0xFFFFFFFFu; }),
                 "page_count 4294967295");
  ExpectRejected(WithModel([](format::IndexModel& m) { m.blocks[0].page_count = 4097; }), "page_count 4097");
}

TEST_CASE("limits: counts larger than their sections", "[limits]") {
  ExpectRejected(WithIndexBytes([](std::vector<uint8_t>& idx) {
                   halite::StoreLe32(&idx[SectionBody(idx, format::SectionType::kBlocks)], 0xFFFFFFFFu);
                 }),
                 "block_count 4294967295");
  ExpectRejected(WithIndexBytes([](std::vector<uint8_t>& idx) {
                   halite::StoreLe32(&idx[SectionBody(idx, format::SectionType::kRegions)], 0xFFFFFFFFu);
                 }),
                 "region_count 4294967295");
  ExpectRejected(WithIndexBytes([](std::vector<uint8_t>& idx) {
                   halite::StoreLe32(&idx[SectionBody(idx, format::SectionType::kBlobs)], 0xFFFFFFFFu);
                 }),
                 "blob_count 4294967295");
  ExpectRejected(WithIndexBytes([](std::vector<uint8_t>& idx) {
                   halite::StoreLe32(&idx[SectionBody(idx, format::SectionType::kRestoreOrder)], 0xFFFFFFFFu);
                 }),
                 "RESTORE_ORDER");
  ExpectRejected(WithIndexBytes([](std::vector<uint8_t>& idx) {
                   halite::StoreLe16(&idx[SectionBody(idx, format::SectionType::kMetadata) + 32], 0xFFFF);
                 }),
                 "string length over 256");
  ExpectRejected(WithIndexBytes([](std::vector<uint8_t>& idx) {
                   halite::StoreLe16(&idx[SectionBody(idx, format::SectionType::kRegions) + 8 + 22], 0xFFFF);
                 }),
                 "name_length 65535");
}

TEST_CASE("limits: a blob whose raw_length is over 2^30", "[limits]") {
  ExpectRejected(WithModel([](format::IndexModel& m) { m.blobs[0].raw_length = (1ull << 30) + 1; }),
                 "over the 2^30 limit");
  ExpectRejected(WithModel([](format::IndexModel& m) { m.blobs[0].raw_length = ~0ull; }), "over the 2^30 limit");
}

TEST_CASE("limits: a dictionary over 1 MiB", "[limits]") {
  ExpectRejected(WithModel([](format::IndexModel& m) {
                   m.dictionary.assign((1u << 20) + 8, 0x37);
                 }),
                 "expected 8..1 MiB");
}

TEST_CASE("limits: an index_length larger than the file", "[limits]") {
  auto patch_footer = [](uint64_t index_length, uint64_t index_offset) {
    std::vector<uint8_t> f = Valid();
    Parts p = Split(f);
    format::Footer nf = p.footer;
    nf.index_length = index_length;
    nf.index_offset = index_offset;
    auto fb = format::EncodeFooter(nf);
    std::copy(fb.begin(), fb.end(), f.end() - 64);
    return f;
  };
  const uint64_t size = Valid().size();
  ExpectRejected(patch_footer(1ull << 40, size - 64 - (1ull << 40)), "index_length");
  ExpectRejected(patch_footer(size - 64 + 8, uint64_t(-8)), "index_length");
  ExpectRejected(patch_footer((size - 128 + 8) / 8 * 8, 56), "index_length");
  ExpectRejected(patch_footer(~0ull & ~7ull, 72), "index_length");
}

TEST_CASE("limits: every invalid test vector is rejected within the allocation limit", "[limits]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(HALITE_VECTOR_DIR) / "invalid";
  if (!fs::exists(dir)) {
    WARN("no test vectors at " << dir.string());
    return;
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".hlt") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t largest = 0;
    Status s = OpenAndReadAll(std::move(bytes), &largest);
    INFO(e.path().filename().string() << ": " << s.ToString());
    CHECK_FALSE(s.ok());
    CHECK(largest < kAllocationLimit);
    ++files;
  }
  CHECK(files > 0);
}
