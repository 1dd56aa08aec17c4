// A small checkpoint of synthetic memory for the image server's tests.
#ifndef HALITE_IMAGE_SERVER_TESTS_IMAGE_TEST_SUPPORT_H_
#define HALITE_IMAGE_SERVER_TESTS_IMAGE_TEST_SUPPORT_H_

#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/hint_files.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"

namespace halite::image_server::testing {

struct TestCheckpoint {
  halite::testing::TempDir dir;
  std::string path;
  std::vector<uint8_t> ram;  // region "ram"
  std::vector<uint8_t> rom;  // region "rom", after it in the checkpoint's page numbering
  std::shared_ptr<const CheckpointReader> reader;
};

// `ram_bytes` of synthetic memory (zero runs, duplicates, text, random) in "ram" and 256 KiB in "rom", blocks of
// `block_pages` pages. A save-time access trace that strides through ram (page 0, 97, 194, ...) makes most
// blocks gather pages far apart, as a guest's working set does: a read-ahead around one page does not cover its
// block.
inline std::unique_ptr<TestCheckpoint> MakeCheckpoint(uint64_t ram_bytes, uint64_t seed, uint32_t block_pages = 16) {
  auto t = std::make_unique<TestCheckpoint>();
  t->path = t->dir.File("ckpt.hlt");
  t->ram = halite::testing::SyntheticBytes(ram_bytes, seed);
  t->rom = halite::testing::SyntheticBytes(256 << 10, seed + 1);
  WriterOptions wo;
  wo.block_pages = block_pages;
  wo.sink.sync = false;
  auto w = CheckpointWriter::Create(t->path, wo);
  REQUIRE(w.has_value());
  REQUIRE((*w)->AddRegion("ram", 0, ram_bytes).has_value());
  REQUIRE((*w)->AddRegion("rom", 0xfffc0000, t->rom.size()).has_value());
  for (uint64_t p = 0; p < ram_bytes / 4096; ++p) {
    REQUIRE((*w)->PutPage(0, p, std::span<const uint8_t>(t->ram).subspan(p * 4096, 4096)).ok());
  }
  for (uint64_t p = 0; p < t->rom.size() / 4096; ++p) {
    REQUIRE((*w)->PutPage(1, p, std::span<const uint8_t>(t->rom).subspan(p * 4096, 4096)).ok());
  }
  std::vector<PageRun> trace;
  const uint64_t pages = ram_bytes / 4096;
  for (uint64_t i = 0; i < pages / 2; ++i) trace.push_back(PageRun{PageRef{0, (i * 97) % pages}, 1});
  REQUIRE((*w)->AddAccessedPages(trace).ok());
  REQUIRE((*w)->Finish().has_value());
  auto r = CheckpointReader::Open(t->path);
  REQUIRE(r.has_value());
  t->reader = std::shared_ptr<const CheckpointReader>(std::move(*r));
  return t;
}

// Flips a byte in the middle of block `block`'s payload on disk and reopens the reader.
inline void DamageBlock(TestCheckpoint& t, uint32_t block) {
  const BlockInfo b = t.reader->blocks()[block];
  FILE* f = std::fopen(t.path.c_str(), "r+b");
  REQUIRE(f != nullptr);
  REQUIRE(std::fseek(f, static_cast<long>(b.offset + b.stored_length / 2), SEEK_SET) == 0);
  const int c = std::fgetc(f);
  REQUIRE(std::fseek(f, static_cast<long>(b.offset + b.stored_length / 2), SEEK_SET) == 0);
  std::fputc(c ^ 0x40, f);
  std::fclose(f);
  auto r = CheckpointReader::Open(t.path);
  REQUIRE(r.has_value());
  t.reader = std::shared_ptr<const CheckpointReader>(std::move(*r));
}

// A stored page of region "ram" whose block holds at least `min_pages` of ram's pages; its block in *block.
inline uint64_t StoredRamPage(const TestCheckpoint& t, uint32_t* block, size_t min_pages = 2) {
  for (uint64_t p = 0; p < t.ram.size() / 4096; ++p) {
    const PageLocation loc = t.reader->Locate(p);
    if (loc.kind != PageKind::kStored) continue;
    size_t ours = 0;
    for (const auto& m : t.reader->BlockMembers(loc.block)) ours += m.page < t.ram.size() / 4096;
    if (ours >= min_pages) {
      *block = loc.block;
      return p;
    }
  }
  FAIL("no stored page in a block of several ram pages");
  return 0;
}

}  // namespace halite::image_server::testing

#endif  // HALITE_IMAGE_SERVER_TESTS_IMAGE_TEST_SUPPORT_H_
