// Writer -> reader round trips: every policy, several block sizes, multiple regions, dedup, dictionary, blobs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/raw_export.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"

using namespace halite;

namespace {

constexpr size_t kPage = 4096;

struct Saved {
  std::vector<uint8_t> bytes;
  WriteSummary summary;
};

// Saves `mem` as region "ram" (pages given in shuffled order), with optional hints.
Saved Save(const std::vector<uint8_t>& mem, WriterOptions opt, const std::vector<PageRun>& access = {},
           const std::vector<PageRun>& va = {}) {
  Saved s;
  auto w = CheckpointWriter::Create(NewMemorySink("mem", &s.bytes), opt);
  REQUIRE(w.has_value());
  auto r = (*w)->AddRegion("ram", 0, mem.size());
  REQUIRE(r.has_value());
  std::vector<uint64_t> order(mem.size() / kPage);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(42));
  for (uint64_t p : order) REQUIRE((*w)->PutPage(*r, p, std::span(mem.data() + p * kPage, kPage)).ok());
  REQUIRE((*w)->AddAccessedPages(access).ok());
  REQUIRE((*w)->AddVaRuns(va).ok());
  auto sum = (*w)->Finish();
  INFO((sum.has_value() ? std::string() : sum.error().ToString()));
  REQUIRE(sum.has_value());
  s.summary = *sum;
  return s;
}

void ExpectContent(const std::vector<uint8_t>& ckpt, const std::vector<uint8_t>& mem) {
  auto reader = CheckpointReader::Open(NewMemoryFile("mem", ckpt));
  INFO((reader.has_value() ? std::string() : reader.error().ToString()));
  REQUIRE(reader.has_value());
  REQUIRE((*reader)->VerifyAll().ok());
  std::vector<uint8_t> page(kPage);
  for (uint64_t g = 0; g < mem.size() / kPage; ++g) {
    REQUIRE((*reader)->ReadPage(g, page).ok());
    if (std::memcmp(page.data(), mem.data() + g * kPage, kPage) != 0) FAIL("page " << g << " differs");
  }
}

}  // namespace

TEST_CASE("round trip with every policy and several block sizes", "[roundtrip]") {
  auto mem = testing::SyntheticBytes(3 << 20, 3);
  std::vector<PageRun> access = {{{0, 700}, 40, 0}, {{0, 10}, 5, 0}, {{0, 750}, 1, 0}};
  std::vector<PageRun> va = {{{0, 600}, 64, 0}, {{0, 100}, 64, 1}};
  for (const char* policy : {"halite", "access", "va", "physical"}) {
    for (uint32_t bp : {1u, 16u, 64u, 512u}) {
      DYNAMIC_SECTION(policy << " block_pages " << bp) {
        WriterOptions o;
        o.policy = *ParseLayoutPolicy(policy);
        o.block_pages = bp;
        o.threads = 2;
        Saved s = Save(mem, o, access, va);
        ExpectContent(s.bytes, mem);
        CHECK(s.summary.pages == mem.size() / kPage);
        CHECK(s.summary.zero_pages + s.summary.duplicate_pages + s.summary.stored_pages == s.summary.pages);
      }
    }
  }
}

TEST_CASE("zero pages are never stored and duplicates are stored once", "[roundtrip]") {
  std::vector<uint8_t> mem(64 * kPage, 0);
  testing::SyntheticMemory gen(5);
  gen.MakePage(testing::PageFlavor::kText, &mem[3 * kPage]);
  std::memcpy(&mem[9 * kPage], &mem[3 * kPage], kPage);
  std::memcpy(&mem[40 * kPage], &mem[3 * kPage], kPage);
  gen.MakePage(testing::PageFlavor::kRandom, &mem[20 * kPage]);
  WriterOptions o;
  o.block_pages = 4;
  Saved s = Save(mem, o);
  CHECK(s.summary.stored_pages == 2);
  CHECK(s.summary.duplicate_pages == 2);
  CHECK(s.summary.zero_pages == 60);
  auto reader = CheckpointReader::Open(NewMemoryFile("m", s.bytes));
  REQUIRE(reader.has_value());
  // The three copies share one slot; the block that holds it lists all three pages as members.
  auto loc = (*reader)->Locate(3);
  CHECK(loc.kind == PageKind::kStored);
  CHECK((*reader)->Locate(9).block == loc.block);
  CHECK((*reader)->Locate(40).slot_in_block == loc.slot_in_block);
  size_t members = 0;
  for (const auto& m : (*reader)->BlockMembers(loc.block)) members += (m.slot == loc.slot_in_block);
  CHECK(members == 3);
  CHECK((*reader)->Locate(0).kind == PageKind::kZero);
  ExpectContent(s.bytes, mem);
}

TEST_CASE("the stored copy of a duplicate is the first in plan order", "[roundtrip]") {
  std::vector<uint8_t> mem(16 * kPage, 0);
  testing::SyntheticMemory gen(6);
  gen.MakePage(testing::PageFlavor::kCode, &mem[2 * kPage]);
  std::memcpy(&mem[12 * kPage], &mem[2 * kPage], kPage);
  gen.MakePage(testing::PageFlavor::kText, &mem[5 * kPage]);
  WriterOptions o;
  o.block_pages = 1;
  // Page 12 is accessed first, so its copy is the one stored, in the hot block 0.
  Saved s = Save(mem, o, {{{0, 12}, 1, 0}});
  auto reader = CheckpointReader::Open(NewMemoryFile("m", s.bytes));
  REQUIRE(reader.has_value());
  CHECK((*reader)->Locate(12).block == 0);
  CHECK((*reader)->Locate(2).block == 0);
  CHECK((*reader)->blocks()[0].hot());
  CHECK((*reader)->working_set_blocks() == 1);
  CHECK_FALSE((*reader)->blocks()[1].hot());
}

TEST_CASE("hot blocks hold only working-set pages, in access order", "[roundtrip]") {
  auto mem = testing::SyntheticBytes(2 << 20, 9);
  // Make sure the accessed pages are non-zero and distinct.
  for (uint64_t p : {300u, 5u, 301u, 302u, 77u}) {
    testing::SyntheticMemory(p).MakePage(testing::PageFlavor::kRandom, &mem[p * kPage]);
  }
  WriterOptions o;
  o.block_pages = 4;
  Saved s = Save(mem, o, {{{0, 300}, 1, 0}, {{0, 5}, 1, 0}, {{0, 301}, 2, 0}, {{0, 77}, 1, 0}, {{0, 5}, 1, 0}});
  auto reader = CheckpointReader::Open(NewMemoryFile("m", s.bytes));
  REQUIRE(reader.has_value());
  CHECK((*reader)->working_set_blocks() == 2);  // 5 pages, 4 per block
  CHECK((*reader)->Locate(300).block == 0);
  CHECK((*reader)->Locate(300).slot_in_block == 0);
  CHECK((*reader)->Locate(5).slot_in_block == 1);
  CHECK((*reader)->Locate(77).block == 1);
  CHECK((*reader)->blocks()[1].page_count == 1);  // forced boundary after the working set
  ExpectContent(s.bytes, mem);
}

TEST_CASE("a page given twice keeps the last copy", "[roundtrip]") {
  std::vector<uint8_t> a(kPage, 0x11), b(kPage, 0x22), out;
  auto w = CheckpointWriter::Create(NewMemorySink("m", &out), {});
  REQUIRE(w.has_value());
  auto r = (*w)->AddRegion("ram", 0, 2 * kPage);
  REQUIRE((*w)->PutPage(*r, 1, a).ok());
  REQUIRE((*w)->PutPage(*r, 1, b).ok());
  auto sum = (*w)->Finish();
  REQUIRE(sum.has_value());
  CHECK(sum->absent_pages == 1);
  auto reader = CheckpointReader::Open(NewMemoryFile("m", out));
  REQUIRE(reader.has_value());
  std::vector<uint8_t> page(kPage);
  REQUIRE((*reader)->ReadPage(1, page).ok());
  CHECK(page == b);
  CHECK((*reader)->Locate(0).kind == PageKind::kAbsent);
}

TEST_CASE("multiple regions, blobs and metadata survive", "[roundtrip]") {
  std::vector<uint8_t> out;
  WriterOptions o;
  o.metadata.vmm_kind = VmmKind::kQemu;
  o.metadata.machine_type = "pc-i440fx-7.2";
  o.metadata.creator = "test";
  auto w = CheckpointWriter::Create(NewMemorySink("m", &out), o);
  REQUIRE(w.has_value());
  auto ram = (*w)->AddRegion("pc.ram", 0, 64 * kPage);
  auto vram = (*w)->AddRegion("0000:00:02.0/vga.vram", 0xfd000000, 8 * kPage, 8192);
  REQUIRE(ram.has_value());
  REQUIRE(vram.has_value());
  auto mem = testing::SyntheticBytes(64 * kPage, 1);
  for (uint64_t p = 0; p < 64; ++p) REQUIRE((*w)->PutPage(*ram, p, std::span(&mem[p * kPage], kPage)).ok());
  std::vector<uint8_t> vpage(kPage, 0x5a);
  REQUIRE((*w)->PutPage(*vram, 7, vpage).ok());
  std::vector<uint8_t> state(100000);
  for (size_t i = 0; i < state.size(); ++i) state[i] = uint8_t(i / 100);
  REQUIRE((*w)->AddBlob("device-state", state).ok());
  REQUIRE((*w)->AddBlob("empty", {}).ok());
  CHECK((*w)->AddBlob("empty", {}).code() == StatusCode::kInvalidArgument);
  REQUIRE((*w)->Finish().has_value());

  auto reader = CheckpointReader::Open(NewMemoryFile("m", out));
  REQUIRE(reader.has_value());
  auto& r = **reader;
  CHECK(r.metadata().machine_type == "pc-i440fx-7.2");
  CHECK(r.metadata().vmm_kind == VmmKind::kQemu);
  REQUIRE(r.regions().size() == 2);
  CHECK(r.regions()[1].host_page_size == 8192);
  CHECK(*r.FindRegion("0000:00:02.0/vga.vram") == 1);
  CHECK(r.FindRegion("nope").error().code() == StatusCode::kNotFound);
  auto blob = r.ReadBlob("device-state");
  REQUIRE(blob.has_value());
  CHECK(*blob == state);
  CHECK(r.blobs()[0].compressed());
  CHECK(r.ReadBlob("empty")->empty());
  std::vector<uint8_t> page(kPage);
  REQUIRE(r.ReadPage(r.GlobalPage({1, 7}), page).ok());
  CHECK(page == vpage);
  CHECK(r.PageOf(r.GlobalPage({1, 7})) == PageRef{1, 7});
  REQUIRE(r.VerifyAll().ok());
}

TEST_CASE("dictionary modes round-trip", "[roundtrip]") {
  auto mem = testing::SyntheticBytes(4 << 20, 12);
  for (auto mode : {DictionaryMode::kOn, DictionaryMode::kOff, DictionaryMode::kAuto}) {
    WriterOptions o;
    o.dictionary = mode;
    o.block_pages = 8;
    Saved s = Save(mem, o);
    if (mode == DictionaryMode::kOn) CHECK(s.summary.dictionary_bytes > 0);
    if (mode == DictionaryMode::kOff) CHECK(s.summary.dictionary_bytes == 0);
    ExpectContent(s.bytes, mem);
  }
}

TEST_CASE("ReadBlocks batch equals single reads", "[roundtrip]") {
  testing::TempDir dir;
  auto mem = testing::SyntheticBytes(4 << 20, 13);
  Saved s = Save(mem, WriterOptions{});
  std::string path = dir.File("c.hlt");
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(s.bytes.data(), 1, s.bytes.size(), f);
  std::fclose(f);
  auto reader = CheckpointReader::Open(path);
  REQUIRE(reader.has_value());
  auto& r = **reader;
  std::vector<uint32_t> ids;
  for (uint32_t b = 0; b < r.blocks().size(); b += 2) ids.push_back(b);
  std::vector<std::vector<uint8_t>> bufs(ids.size());
  std::vector<std::span<uint8_t>> outs;
  for (size_t i = 0; i < ids.size(); ++i) {
    bufs[i].resize(r.blocks()[ids[i]].raw_length());
    outs.push_back(bufs[i]);
  }
  std::vector<Status> st(ids.size());
  REQUIRE(r.ReadBlocks(ids, outs, st).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<uint8_t> one(r.blocks()[ids[i]].raw_length());
    REQUIRE(r.ReadBlock(ids[i], one).ok());
    CHECK(one == bufs[i]);
  }
}

TEST_CASE("raw export is byte-identical and leaves nothing on failure", "[roundtrip]") {
  testing::TempDir dir;
  auto mem = testing::SyntheticBytes(4 << 20, 14);
  Saved s = Save(mem, WriterOptions{});
  auto reader = CheckpointReader::Open(NewMemoryFile("m", s.bytes));
  REQUIRE(reader.has_value());
  std::string out = dir.File("out.img");
  REQUIRE(ExportRawImage(**reader, out).ok());
  FILE* f = std::fopen(out.c_str(), "rb");
  std::vector<uint8_t> back(mem.size());
  REQUIRE(std::fread(back.data(), 1, back.size(), f) == back.size());
  std::fclose(f);
  CHECK(back == mem);

  // A damaged payload: the export fails and no file appears.
  auto bad = s.bytes;
  bad[64 + 100] ^= 0xff;
  auto r2 = CheckpointReader::Open(NewMemoryFile("bad", bad));
  REQUIRE(r2.has_value());
  std::string out2 = dir.File("out2.img");
  Status st = ExportRawImage(**r2, out2);
  CHECK(st.code() == StatusCode::kCorrupt);
  CHECK(::access(out2.c_str(), F_OK) != 0);
}

TEST_CASE("writer rejects bad arguments", "[writer]") {
  std::vector<uint8_t> out;
  WriterOptions o;
  o.block_pages = 0;
  CHECK(CheckpointWriter::Create(NewMemorySink("m", &out), o).error().code() == StatusCode::kInvalidArgument);
  o.block_pages = 4097;
  CHECK_FALSE(CheckpointWriter::Create(NewMemorySink("m", &out), o).has_value());
  auto w = CheckpointWriter::Create(NewMemorySink("m", &out), {});
  REQUIRE(w.has_value());
  CHECK_FALSE((*w)->AddRegion("", 0, 4096).has_value());
  CHECK_FALSE((*w)->AddRegion("r", 0, 4097).has_value());
  CHECK_FALSE((*w)->AddRegion("r", 0, 4096, 3000).has_value());
  CHECK_FALSE((*w)->AddRegion("bad\nname", 0, 4096).has_value());
  auto r = (*w)->AddRegion("r", 0, 4096);
  REQUIRE(r.has_value());
  CHECK_FALSE((*w)->AddRegion("r", 0, 4096).has_value());
  std::vector<uint8_t> page(kPage, 1);
  CHECK((*w)->PutPage(*r, 1, page).code() == StatusCode::kInvalidArgument);
  CHECK((*w)->PutPage(5, 0, page).code() == StatusCode::kInvalidArgument);
  CHECK((*w)->PutPage(*r, 0, std::span(page.data(), 100)).code() == StatusCode::kInvalidArgument);
  CHECK((*w)->AddAccessedPages(std::vector<PageRun>{{{0, 0}, 2, 0}}).code() == StatusCode::kInvalidArgument);
  auto empty = CheckpointWriter::Create(NewMemorySink("m", &out), {});
  CHECK((*empty)->Finish().error().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("an attached image is classified the same on several workers as on one", "[roundtrip][writer]") {
  // 40 MiB: the scan works in pieces of 16 MiB, so two workers classify pieces concurrently, and zero pages,
  // duplicates (within a piece and across pieces) and random pages sit on both sides of the pieces' edges.
  const uint64_t pages = 10240;
  std::vector<uint8_t> mem(pages * kPage, 0);
  testing::SyntheticMemory gen(11);
  for (uint64_t p = 0; p < pages; ++p) {
    if (p % 5 == 0) continue;  // zero
    gen.MakePage(p % 3 ? testing::PageFlavor::kText : testing::PageFlavor::kRandom, &mem[p * kPage]);
  }
  for (uint64_t edge : {4096u, 8192u}) {  // duplicates of a page of the other piece, at the edges
    std::memcpy(&mem[(edge - 1) * kPage], &mem[(edge + 7) * kPage], kPage);
    std::memcpy(&mem[edge * kPage], &mem[(edge - 9) * kPage], kPage);
  }
  testing::TempDir dir;
  const std::string image = dir.File("ram.img");
  {
    std::vector<uint8_t> copy = mem;
    FILE* f = std::fopen(image.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(copy.data(), 1, copy.size(), f) == copy.size());
    REQUIRE(std::fclose(f) == 0);
  }
  std::vector<WriteSummary> summaries;
  for (unsigned threads : {1u, 2u, 3u}) {
    INFO("threads " << threads);
    Saved s;
    WriterOptions o;
    o.threads = threads;
    o.dictionary = DictionaryMode::kOff;
    auto w = CheckpointWriter::Create(NewMemorySink("mem", &s.bytes), o);
    REQUIRE(w.has_value());
    auto r = (*w)->AddRegion("ram", 0, mem.size());
    REQUIRE(r.has_value());
    REQUIRE((*w)->AttachImage(*r, image).ok());
    auto sum = (*w)->Finish();
    REQUIRE(sum.has_value());
    ExpectContent(s.bytes, mem);
    summaries.push_back(*sum);
  }
  uint64_t zero = 0;
  for (uint64_t p = 0; p < pages; ++p) zero += std::all_of(&mem[p * kPage], &mem[(p + 1) * kPage], [](uint8_t b) { return b == 0; });
  CHECK(summaries[0].zero_pages == zero);
  CHECK(summaries[0].duplicate_pages >= 4);
  for (const WriteSummary& s : summaries) {
    CHECK(s.zero_pages == summaries[0].zero_pages);
    CHECK(s.duplicate_pages == summaries[0].duplicate_pages);
    CHECK(s.stored_pages == summaries[0].stored_pages);
    CHECK(s.blocks == summaries[0].blocks);
  }
}
