// The restore engine over a chain whose child codes changed pages against its parent (format-spec 5.4 BASED, since
// 1.4): the engine reads block groups as it reads blocks, each block of the chain once, whether the loader or a fault
// (streamed, on a page of any part of a group) brings a group in.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <vector>

#include "engine_test_util.h"
#include "halite/restore_engine.h"
#include "support/synthetic_memory.h"

using namespace halite;
using namespace halite::testing;

namespace {

constexpr uint64_t kPages = 2048;

struct Chain {
  std::map<std::string, std::vector<uint8_t>> files;
  std::vector<uint8_t> child_content;
  std::vector<Region> regions;
};

// A parent of synthetic memory and a child with one page in eight partly rewritten (8 bytes in every 64): the
// child's changed pages are coded against the parent's blocks.
Chain BuildChain() {
  Chain c;
  std::vector<uint8_t> base = SyntheticBytes(kPages * 4096, 21);
  WriterOptions o;
  o.block_pages = 32;
  o.file_id = FileId{1};
  MemCheckpoint parent = BuildCheckpoint({{"ram", kPages}}, {base}, o);
  c.files["parent.hlt"] = parent.bytes;
  c.regions = parent.regions;
  std::vector<uint8_t> child = base;
  for (uint64_t p = 3; p < kPages; p += 8) {
    for (size_t at = 0; at < 4096; at += 64) child[p * 4096 + at + 24] ^= 0x5a;
  }
  auto reader = CheckpointReader::Open(NewMemoryFile("parent.hlt", c.files["parent.hlt"]));
  REQUIRE(reader.has_value());
  o.file_id = FileId{2};
  o.parent = std::shared_ptr<const CheckpointReader>(std::move(*reader));
  o.parent_path_hint = "parent.hlt";
  MemCheckpoint m = BuildCheckpoint({{"ram", kPages}}, {child}, o);
  c.files["child.hlt"] = m.bytes;
  c.child_content = child;
  return c;
}

std::unique_ptr<CheckpointReader> OpenChild(const Chain& c) {
  ReaderOptions ro;
  ro.open_parent = [&c](const std::string& path) -> Result<std::unique_ptr<RandomAccessFile>> {
    auto it = c.files.find(path);
    if (it == c.files.end()) return Status::IoError(path + ": no such file", 2);
    return NewMemoryFile(path, it->second);
  };
  auto r = CheckpointReader::Open(NewMemoryFile("child.hlt", c.files.at("child.hlt")), ro);
  INFO((r ? std::string() : r.error().ToString()));
  REQUIRE(r.has_value());
  return std::move(*r);
}

uint64_t Parts(const CheckpointReader& r) {
  uint64_t n = 0;
  for (const ChainLevel& l : r.chain()) n += l.live_blocks;
  return n;
}

void CheckAllPages(const RecordingSink& sink, const Chain& c) {
  for (uint64_t p = 0; p < kPages; ++p) {
    INFO("page " << p);
    REQUIRE(sink.Installed(PageRef{0, p}));
    REQUIRE(std::memcmp(sink.Page(PageRef{0, p}), c.child_content.data() + p * 4096, 4096) == 0);
  }
}

}  // namespace

TEST_CASE("the loader restores a chain of block groups, each block of the chain read once", "[engine][chain]") {
  const Chain c = BuildChain();
  auto reader = OpenChild(c);
  REQUIRE(reader->chain()[0].based_blocks > 0);
  RecordingSink sink(c.regions);
  auto engine = RestoreEngine::Create(*reader, sink, RestoreEngineOptions{});
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  REQUIRE((*engine)->WaitForLoader().ok());
  for (uint64_t p = 0; p < kPages; ++p) {
    if (reader->Locate(p).kind != PageKind::kStored) REQUIRE((*engine)->HandleFault(PageRef{0, p}).has_value());
  }
  CheckAllPages(sink, c);
  CHECK(sink.double_installs() == 0);
  CHECK((*engine)->Stats().blocks_read == reader->blocks().size());
  CHECK(reader->read_stats().blocks_fetched == Parts(*reader));
}

TEST_CASE("faults on pages of any part of a group bring the whole group, once", "[engine][chain]") {
  const Chain c = BuildChain();
  auto reader = OpenChild(c);
  RecordingSink sink(c.regions);
  RestoreEngineOptions o;
  o.background_loader = false;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  // First the changed pages (in the child's part of their group), then every other page.
  for (uint64_t p = 3; p < kPages; p += 8) REQUIRE((*engine)->HandleFault(PageRef{0, p}).has_value());
  for (uint64_t p = 0; p < kPages; ++p) REQUIRE((*engine)->HandleFault(PageRef{0, p}).has_value());
  CheckAllPages(sink, c);
  CHECK(sink.double_installs() == 0);
  CHECK((*engine)->Stats().blocks_read == reader->blocks().size());
  CHECK(reader->read_stats().blocks_fetched == Parts(*reader));
}
