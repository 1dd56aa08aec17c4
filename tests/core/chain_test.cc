// Incremental checkpoints (format-spec 12) through the library: the writer's choice of IN_PARENT pages (decided on
// bytes, the parent's PAGE_HASHES only ruling pages out), the reader's view of a chain, finding a moved parent, and
// the depth limit a reader may lower.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "codec/hashing.h"
#include "halite/bytes.h"
#include "format/index_codec.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/halite_c.h"
#include "support/checksum_reseal.h"
#include "support/temp_dir.h"

using namespace halite;

namespace {

constexpr uint64_t kPages = 300;

std::vector<uint8_t> Page(uint64_t page, uint32_t version) {
  std::vector<uint8_t> p(4096);
  for (size_t i = 0; i < p.size(); i += 8) {
    uint64_t v = (page * 0x9E3779B97F4A7C15ull) ^ (uint64_t(version) << 40) ^ (i / 64);
    std::memcpy(&p[i], &v, 8);
  }
  return p;
}

// Writes `pages` (version per page; 0 = zero page) to `path`, with `parent` when given.
WriteSummary Write(const std::string& path, const std::vector<uint32_t>& versions,
                   std::shared_ptr<const CheckpointReader> parent = nullptr, bool hashes = true) {
  WriterOptions o;
  o.threads = 2;
  o.block_pages = 16;
  o.sink.sync = false;
  o.parent = std::move(parent);
  o.page_hashes = hashes;
  auto w = CheckpointWriter::Create(path, o);
  REQUIRE(w);
  REQUIRE((*w)->AddRegion("ram", 0, versions.size() * 4096));
  for (uint64_t g = 0; g < versions.size(); ++g) {
    if (versions[g] == 0) {
      REQUIRE((*w)->PutZeroPages(0, g, 1).ok());
    } else {
      REQUIRE((*w)->PutPage(0, g, Page(g, versions[g])).ok());
    }
  }
  auto s = (*w)->Finish();
  REQUIRE(s);
  return *s;
}

std::shared_ptr<const CheckpointReader> OpenShared(const std::string& path, ReaderOptions o = {}) {
  auto r = CheckpointReader::Open(path, o);
  INFO((r ? std::string() : r.error().ToString()));
  REQUIRE(r);
  return std::shared_ptr<const CheckpointReader>(std::move(*r));
}

void CheckView(const CheckpointReader& r, const std::vector<uint32_t>& versions, bool verify = true) {
  REQUIRE(r.total_pages() == versions.size());
  std::vector<uint8_t> page(4096);
  for (uint64_t g = 0; g < versions.size(); ++g) {
    INFO("page " << g);
    REQUIRE(r.ReadPage(g, page).ok());
    CHECK(page == (versions[g] ? Page(g, versions[g]) : std::vector<uint8_t>(4096, 0)));
  }
  if (verify) REQUIRE(r.VerifyAll().ok());
}

}  // namespace

TEST_CASE("a child stores only changed pages and reads back through its parent", "[chain]") {
  testing::TempDir dir;
  std::vector<uint32_t> base(kPages, 1), child = base, grandchild;
  for (uint64_t g = 0; g < kPages; g += 10) child[g] = 2;  // 30 changed
  for (uint64_t g = 5; g < kPages; g += 50) child[g] = 0;  // 6 newly zero
  grandchild = child;
  for (uint64_t g = 1; g < kPages; g += 30) grandchild[g] = 3;

  WriteSummary bs = Write(dir.File("base.hlt"), base);
  CHECK(bs.in_parent_pages == 0);
  CHECK(bs.page_hash_bytes == 16 + 8 + 8 * bs.stored_pages);
  auto base_reader = OpenShared(dir.File("base.hlt"));
  CHECK(base_reader->format_minor() == format::kFormatMinorPackedPageMap);  // PAGE_HASHES (1.1), a packed page map (1.6)
  WriteSummary cs = Write(dir.File("child.hlt"), child, base_reader);
  CHECK(cs.in_parent_pages == kPages - 30 - 6);
  CHECK(cs.stored_pages == 30);
  CHECK(cs.zero_pages == 6);
  auto child_reader = OpenShared(dir.File("child.hlt"));
  // Each changed page differs from its parent's version in one byte of eight: coded against the parent (1.4).
  CHECK(cs.based_blocks > 0);
  CHECK(cs.based_pages <= 30);
  CHECK(child_reader->format_minor() == format::kFormatMinorPackedPageMap);  // BASED (1.4), a packed sparse map (1.6)
  CheckView(*child_reader, child);
  WriteSummary gs = Write(dir.File("grandchild.hlt"), grandchild, child_reader, false);
  CHECK(gs.in_parent_pages == kPages - 10);  // zero pages too: the parent's are zero
  CHECK(gs.zero_pages == 0);

  auto r = OpenShared(dir.File("grandchild.hlt"));
  CheckView(*r, grandchild);
  REQUIRE(r->chain().size() == 3);
  CHECK(r->chain_depth() == 2);
  CHECK(r->chain()[0].pages == 10);
  CHECK(r->chain()[1].pages == 30);  // the grandchild's changes (30k+1) are none of the child's (10k)
  CHECK(r->chain()[2].pages == kPages - 30 - 6 - 10);
  CHECK(r->chain()[1].path_hint == "base.hlt");
  CHECK_FALSE(r->has_page_hashes());
  CHECK_FALSE(r->PageHash(1).has_value());  // stored in the grandchild, which has no PAGE_HASHES
  CHECK(r->PageHash(2).has_value());        // from the base, which has
  // The restore order is a permutation of the view's blocks, this file's first.
  std::vector<uint32_t> order = r->restore_order();
  REQUIRE(order.size() == r->blocks().size());
  std::sort(order.begin(), order.end());
  for (uint32_t i = 0; i < order.size(); ++i) CHECK(order[i] == i);
  CHECK(r->blocks()[r->restore_order()[0]].chain_level == 0);
}

TEST_CASE("equal hashes are not enough: the bytes decide", "[chain]") {
  testing::TempDir dir;
  std::vector<uint32_t> base(32, 1), child(32, 1);
  child[7] = 2;
  Write(dir.File("base.hlt"), base);
  // Forge the parent's PAGE_HASHES entry of page 7 (slot 7: every page of the base is stored, in order) to the child's page hash: a collision, as far as the writer sees.
  std::ifstream in(dir.File("base.hlt"), std::ios::binary);
  std::vector<uint8_t> f((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const uint64_t index_offset = halite::LoadLe64(&f[f.size() - 64]);
  const uint64_t index_length = halite::LoadLe64(&f[f.size() - 56]);
  std::vector<uint8_t> index(f.begin() + long(index_offset), f.begin() + long(index_offset + index_length));
  size_t body = testing::FindSectionBody(index, format::kPageHashesSectionType);
  REQUIRE(body != SIZE_MAX);
  halite::StoreLe64(&index[body + 8 + 8 * 7], codec::Xxh3_128(Page(7, 2)).low);
  f = testing::ResealWithIndex(f, index);
  std::ofstream(dir.File("forged.hlt"), std::ios::binary).write(reinterpret_cast<const char*>(f.data()), long(f.size()));

  auto parent = OpenShared(dir.File("forged.hlt"));
  CHECK_FALSE(parent->VerifyAll().ok());  // verify catches the forged entry
  WriteSummary s = Write(dir.File("child.hlt"), child, parent);
  CHECK(s.in_parent_pages == 31);
  CHECK(s.stored_pages == 1);  // page 7 compared, found different, stored
  auto r = OpenShared(dir.File("child.hlt"));
  CheckView(*r, child, false);
  Status v = r->VerifyAll();  // verify checks the whole chain, so it finds the forged parent entry
  CHECK_THAT(v.message(), Catch::Contains("forged.hlt: PAGE_HASHES: slot 7"));
}

TEST_CASE("a child whose pages all changed is a full checkpoint", "[chain]") {
  testing::TempDir dir;
  Write(dir.File("base.hlt"), std::vector<uint32_t>(8, 1), nullptr, false);
  WriteSummary s = Write(dir.File("child.hlt"), std::vector<uint32_t>(8, 2), OpenShared(dir.File("base.hlt")), false);
  CHECK(s.in_parent_pages == 0);
  auto r = OpenShared(dir.File("child.hlt"));
  CHECK(r->format_minor() != format::kFormatMinorParent);  // no PARENT: 1.0, or 1.6 for a packed page map
  CHECK(r->parent() == nullptr);
}

TEST_CASE("a moved parent is found with parent_dirs, a lower depth limit is enforced", "[chain]") {
  testing::TempDir dir;
  std::vector<uint32_t> base(16, 1), child(16, 1);
  child[3] = 2;
  std::filesystem::create_directories(dir.File("a"));
  std::filesystem::create_directories(dir.File("moved"));
  Write(dir.File("a/base.hlt"), base);
  Write(dir.File("child.hlt"), child, OpenShared(dir.File("a/base.hlt")));
  CHECK(OpenShared(dir.File("child.hlt"))->chain()[0].path_hint == "a/base.hlt");
  std::filesystem::rename(dir.File("a/base.hlt"), dir.File("moved/base.hlt"));

  auto missing = CheckpointReader::Open(dir.File("child.hlt"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == StatusCode::kIoError);
  CHECK_THAT(missing.error().message(), Catch::Contains("child.hlt") && Catch::Contains("a/base.hlt"));

  ReaderOptions o;
  o.parent_dirs = {dir.File("nowhere"), dir.File("moved")};
  CheckView(*OpenShared(dir.File("child.hlt"), o), child);

  // The C API takes the same directories.
  hlt_reader* c = nullptr;
  CHECK(hlt_reader_open(dir.File("child.hlt").c_str(), &c) == HLT_EIO);
  const std::string nowhere = dir.File("nowhere"), moved = dir.File("moved");
  const char* dirs[] = {nowhere.c_str(), moved.c_str()};
  REQUIRE(hlt_reader_open_chain(dir.File("child.hlt").c_str(), dirs, 2, &c) == HLT_OK);
  std::vector<uint8_t> page(4096);
  REQUIRE(hlt_reader_read_page(c, 0, 3, page.data()) == HLT_OK);
  CHECK(page == Page(3, 2));
  REQUIRE(hlt_reader_read_page(c, 0, 4, page.data()) == HLT_OK);  // from the moved parent
  CHECK(page == Page(4, 1));
  hlt_reader_close(c);
  CHECK(hlt_reader_open_chain(dir.File("child.hlt").c_str(), dirs, 1, &c) == HLT_EIO);
  CHECK(hlt_reader_open_chain(dir.File("child.hlt").c_str(), nullptr, 1, &c) == HLT_EINVAL);

  o.max_chain_depth = 0;
  auto limited = CheckpointReader::Open(dir.File("child.hlt"), o);
  REQUIRE_FALSE(limited);
  CHECK(limited.error().code() == StatusCode::kCorrupt);
  CHECK_THAT(limited.error().message(), Catch::Contains("exceeds this reader's limit of 0"));
}

TEST_CASE("pages declared equal to the parent are references without being read or compared", "[chain]") {
  testing::TempDir dir;
  std::vector<uint32_t> base(kPages, 1);
  for (uint64_t g = 0; g < kPages; g += 7) base[g] = 0;
  Write(dir.File("base.hlt"), base, nullptr, /*hashes=*/false);  // no PAGE_HASHES: every candidate is decoded
  auto parent = OpenShared(dir.File("base.hlt"));

  std::vector<uint32_t> child = base;
  for (uint64_t g = 3; g < kPages; g += 20) child[g] = 2;  // written by the clone
  WriterOptions o;
  o.threads = 2;
  o.block_pages = 16;
  o.sink.sync = false;
  o.parent = parent;
  auto w = CheckpointWriter::Create(dir.File("child.hlt"), o);
  REQUIRE(w);
  REQUIRE((*w)->AddRegion("ram", 0, kPages * 4096));
  // The kernel's answer: every page but the written ones is unwritten. Declared before the pages arrive.
  uint64_t declared = 0;
  for (uint64_t g = 0; g < kPages; ++g) {
    if (child[g] == base[g]) {
      REQUIRE((*w)->DeclareInParent(0, g, 1).ok());
      ++declared;
    }
  }
  // Page 1 is declared: what is given for it afterwards is ignored (the parent's content stands), and the
  // page-table walk's reads answer from the parent.
  CHECK((*w)->ContentOf(0, 1) == CheckpointWriter::PageContent::kData);
  CHECK((*w)->ContentOf(0, 0) == CheckpointWriter::PageContent::kZero);
  std::array<uint8_t, 4096> buf{};
  auto got = (*w)->ReadPage(0, 1, buf);
  REQUIRE(got);
  CHECK(*got);
  CHECK(std::vector<uint8_t>(buf.begin(), buf.end()) == Page(1, 1));
  for (uint64_t g = 0; g < kPages; ++g) {
    const std::vector<uint8_t> p = g == 1 ? Page(1, 99) : child[g] ? Page(g, child[g]) : std::vector<uint8_t>();
    REQUIRE((p.empty() ? (*w)->PutZeroPages(0, g, 1) : (*w)->PutPage(0, g, p)).ok());
  }
  auto s = (*w)->Finish();
  REQUIRE(s);
  CHECK(s->declared_in_parent_pages == declared);
  CHECK(s->in_parent_pages == declared);
  // Only the written pages are compared (they could still be equal): at most one parent block each, never the
  // blocks holding nothing but declared pages.
  uint64_t written = 0;
  for (uint64_t g = 0; g < kPages; ++g) written += child[g] != base[g] ? 1 : 0;
  CHECK(s->parent_blocks_read <= written);
  CHECK(s->parent_blocks_read < parent->blocks().size());
  CHECK(s->stored_pages == kPages - declared);
  CheckView(*OpenShared(dir.File("child.hlt")), child);  // page 1 is the parent's, not version 99
}

TEST_CASE("DeclareInParent needs a parent laid out like the child", "[chain]") {
  testing::TempDir dir;
  Write(dir.File("base.hlt"), std::vector<uint32_t>(kPages, 1));
  WriterOptions o;
  o.sink.sync = false;
  {
    auto w = CheckpointWriter::Create(dir.File("a.hlt"), o);
    REQUIRE(w);
    REQUIRE((*w)->AddRegion("ram", 0, kPages * 4096));
    CHECK((*w)->DeclareInParent(0, 0, 1).code() == StatusCode::kInvalidArgument);  // no parent
  }
  o.parent = OpenShared(dir.File("base.hlt"));
  auto w = CheckpointWriter::Create(dir.File("b.hlt"), o);
  REQUIRE(w);
  REQUIRE((*w)->AddRegion("other", 0, kPages * 4096));
  Status s = (*w)->DeclareInParent(0, 0, 1);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("not laid out as the parent's") != std::string::npos);
  CHECK((*w)->DeclareInParent(0, kPages - 1, 2).code() == StatusCode::kInvalidArgument);  // past the region
}
