// Every single-byte corruption and every truncation of a small checkpoint is either rejected with an error or
// (where the byte holds no meaning the reader depends on... which in this format is none) yields exactly the
// original content. Never a crash, never wrong data.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "support/synthetic_memory.h"

using namespace halite;

namespace {

constexpr size_t kPage = 4096;

struct Original {
  std::vector<uint8_t> file;
  std::vector<uint8_t> memory;
  std::vector<uint8_t> blob;
};

const Original& SmallCheckpoint() {
  static const Original o = [] {
    Original o;
    o.memory = testing::SyntheticBytes(24 * kPage, 21);
    testing::SyntheticMemory(3).MakePage(testing::PageFlavor::kRandom, &o.memory[4 * kPage]);  // a raw block
    std::memcpy(&o.memory[10 * kPage], &o.memory[11 * kPage], kPage);                        // a duplicate
    o.blob.assign(300, 7);
    WriterOptions opt;
    opt.block_pages = 3;
    opt.threads = 1;
    auto w = CheckpointWriter::Create(NewMemorySink("sweep", &o.file), opt).value();
    uint32_t r = *w->AddRegion("ram", 0, o.memory.size());
    for (uint64_t p = 0; p < 24; ++p) {
      if (p == 17) continue;  // one absent page
      (void)w->PutPage(r, p, std::span(&o.memory[p * kPage], kPage));
    }
    std::memset(&o.memory[17 * kPage], 0, kPage);
    (void)w->AddAccessedPages(std::vector<PageRun>{{{0, 6}, 2, 0}});
    (void)w->AddBlob("state", o.blob);
    (void)w->Finish();
    return o;
  }();
  return o;
}

// Reads everything; returns ok only if every check passed and the content is exactly the original.
Status ReadAllAndCompare(const std::vector<uint8_t>& file, const Original& o, bool* content_equal) {
  *content_equal = false;
  HLT_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(NewMemoryFile("sweep", file)));
  HLT_RETURN_IF_ERROR(reader->VerifyAll());
  std::vector<uint8_t> page(kPage);
  bool equal = reader->total_pages() * kPage == o.memory.size();
  for (uint64_t g = 0; equal && g < reader->total_pages(); ++g) {
    HLT_RETURN_IF_ERROR(reader->ReadPage(g, page));
    equal = std::memcmp(page.data(), &o.memory[g * kPage], kPage) == 0;
  }
  auto blob = reader->ReadBlob("state");
  equal = equal && blob.has_value() && *blob == o.blob;
  *content_equal = equal;
  return Status::Ok();
}

}  // namespace

TEST_CASE("every single-byte flip is rejected", "[corruption]") {
  const Original& o = SmallCheckpoint();
  bool equal = false;
  REQUIRE(ReadAllAndCompare(o.file, o, &equal).ok());
  REQUIRE(equal);
  size_t rejected = 0, accepted_equal = 0;
  for (size_t i = 0; i < o.file.size(); ++i) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      auto f = o.file;
      f[i] ^= mask;
      Status s = ReadAllAndCompare(f, o, &equal);
      if (s.ok()) {
        // Accepted: then it must be the exact original content (a harmless byte). None exist in this format.
        if (!equal) FAIL("flip at offset " << i << " mask " << int(mask) << " accepted with different content");
        ++accepted_equal;
      } else {
        CHECK((s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported));
        ++rejected;
      }
    }
  }
  // Every byte is covered by a checksum or a rule: no flip goes unnoticed.
  CHECK(accepted_equal == 0);
  CHECK(rejected == o.file.size() * 3);
}

TEST_CASE("every truncation is rejected", "[corruption]") {
  const Original& o = SmallCheckpoint();
  for (size_t len = 0; len < o.file.size(); ++len) {
    std::vector<uint8_t> f(o.file.begin(), o.file.begin() + long(len));
    bool equal;
    Status s = ReadAllAndCompare(f, o, &equal);
    if (s.ok()) FAIL("truncation to " << len << " bytes accepted");
    CHECK(s.code() == StatusCode::kCorrupt);
  }
}

TEST_CASE("random and empty files are rejected", "[corruption]") {
  std::mt19937_64 rng(99);
  for (size_t len : {0u, 1u, 64u, 127u, 128u, 129u, 4096u, 100000u}) {
    std::vector<uint8_t> f(len);
    for (auto& b : f) b = uint8_t(rng());
    auto r = CheckpointReader::Open(NewMemoryFile("random", f));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kCorrupt);
  }
  // Random bytes behind a valid footer magic still fail (checksums).
  std::vector<uint8_t> f(5000);
  for (auto& b : f) b = uint8_t(rng());
  std::memcpy(&f[f.size() - 8], "HLTFOOT", 8);
  CHECK_FALSE(CheckpointReader::Open(NewMemoryFile("random", f)).has_value());
}

// Format-spec 12: a child and its parent, served from memory. Every single-byte flip of either file is rejected:
// the child's own checksums and rules, or the parent's, or the parent's fingerprint recorded in the child.
TEST_CASE("every single-byte flip of a child or of its parent is rejected", "[corruption][chain]") {
  const Original& o = SmallCheckpoint();
  std::vector<uint8_t> memory = o.memory, child;
  testing::SyntheticMemory(77).MakePage(testing::PageFlavor::kText, &memory[2 * kPage]);
  testing::SyntheticMemory(78).MakePage(testing::PageFlavor::kCode, &memory[9 * kPage]);
  std::memset(&memory[5 * kPage], 0, kPage);
  auto open = [](const std::vector<uint8_t>& c, const std::vector<uint8_t>& p) {
    ReaderOptions ro;
    ro.open_parent = [&p](const std::string& path) -> Result<std::unique_ptr<RandomAccessFile>> {
      return NewMemoryFile(path, p);
    };
    return CheckpointReader::Open(NewMemoryFile("child", c), ro);
  };
  {
    auto parent = open(o.file, {});
    REQUIRE(parent);
    WriterOptions opt;
    opt.block_pages = 3;
    opt.threads = 1;
    opt.page_hashes = true;
    opt.parent = std::shared_ptr<const CheckpointReader>(std::move(*parent));
    opt.parent_path_hint = "sweep";
    opt.parent_rewrite_fraction = 2;  // every equal page a reference
    auto w = CheckpointWriter::Create(NewMemorySink("child", &child), opt).value();
    uint32_t r = *w->AddRegion("ram", 0, memory.size());
    for (uint64_t p = 0; p < 24; ++p) {
      if (p != 17) REQUIRE(w->PutPage(r, p, std::span(&memory[p * kPage], kPage)).ok());
    }
    auto summary = w->Finish();
    REQUIRE(summary);
    REQUIRE(summary->in_parent_pages == 21);  // 24 pages: 2 changed, 1 newly zero
  }
  auto read_all = [&](const std::vector<uint8_t>& c, const std::vector<uint8_t>& p, bool* equal) -> Status {
    *equal = false;
    HLT_ASSIGN_OR_RETURN(auto reader, open(c, p));
    HLT_RETURN_IF_ERROR(reader->VerifyAll());
    std::vector<uint8_t> page(kPage);
    bool same = reader->total_pages() * kPage == memory.size();
    for (uint64_t g = 0; same && g < reader->total_pages(); ++g) {
      HLT_RETURN_IF_ERROR(reader->ReadPage(g, page));
      same = std::memcmp(page.data(), &memory[g * kPage], kPage) == 0;
    }
    *equal = same;
    return Status::Ok();
  };
  bool equal = false;
  REQUIRE(read_all(child, o.file, &equal).ok());
  REQUIRE(equal);
  for (int which = 0; which < 2; ++which) {
    const std::vector<uint8_t>& target = which == 0 ? child : o.file;
    for (size_t i = 0; i < target.size(); ++i) {
      auto f = target;
      f[i] ^= 0x01;
      Status s = which == 0 ? read_all(f, o.file, &equal) : read_all(child, f, &equal);
      if (s.ok()) FAIL((which == 0 ? "child" : "parent") << " flip at offset " << i << " accepted");
      CHECK((s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported));
    }
  }
}
