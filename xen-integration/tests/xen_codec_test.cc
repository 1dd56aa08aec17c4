// Unit tests of the codec pieces: reading from a pipe, damage sweeps, writer refusals, state blob, layout,
// HVM context, reordering.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <fstream>
#include <thread>
#include <vector>

#include "halite/xen/xen_hvm_context.h"
#include "halite/xen/xen_save_image.h"
#include "halite/xen/xen_stream_reader.h"
#include "halite/xen/xen_stream_writer.h"
#include "xen_test_dump.h"

using namespace halite;
using namespace halite::xen;

namespace {

std::vector<uint8_t> Vector(const std::string& name) {
  std::ifstream f(std::string(HALITE_XEN_VECTOR_DIR) + "/" + name, std::ios::binary);
  REQUIRE(f.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

Status Parse(const std::vector<uint8_t>& bytes, StreamVisitor& v, StreamFormat format = StreamFormat::kXl) {
  ReadOptions o;
  o.format = format;
  MemorySource source(bytes);
  return ReadStream(source, v, o);
}

XenSaveImage Import(const std::vector<uint8_t>& bytes, testing::MemoryPageStore& store) {
  MemorySource source(bytes);
  auto image = ImportSaveStream(source, store, ReadOptions{});
  INFO(image.status().ToString());
  REQUIRE(image.has_value());
  return *image;
}

}  // namespace

TEST_CASE("the reader streams from a pipe in small pieces", "[xen]") {
  auto bytes = Vector("hvm-basic.xl");
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::thread writer([&] {
    // Odd-sized writes so headers and records straddle read boundaries.
    for (size_t off = 0; off < bytes.size(); off += 7) {
      size_t n = std::min<size_t>(7, bytes.size() - off);
      REQUIRE(::write(fds[1], bytes.data() + off, n) == static_cast<ssize_t>(n));
    }
    ::close(fds[1]);
  });
  FdSource source(fds[0], FdSourceOptions{"pipe", 64});
  testing::DumpVisitor dump;
  Status s = ReadStream(source, dump, ReadOptions{});
  writer.join();
  ::close(fds[0]);
  REQUIRE(s.ok());
  testing::DumpVisitor direct;
  REQUIRE(Parse(bytes, direct).ok());
  CHECK(dump.text() == direct.text());
}

TEST_CASE("every truncation of a valid stream is rejected as corrupt", "[xen][sweep]") {
  for (const char* name : {"hvm-basic.xl", "hvm-v2-no-static-data-end.xl"}) {
    auto bytes = Vector(name);
    for (size_t len = 0; len < bytes.size(); ++len) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(len));
      StreamVisitor v;
      Status s = Parse(cut, v);
      if (s.ok() || s.code() != StatusCode::kCorrupt) FAIL(name << " cut at " << len << ": " << s.ToString());
    }
  }
}

TEST_CASE("flipping any byte yields an error or a valid stream, never a crash", "[xen][sweep]") {
  auto bytes = Vector("hvm-basic.xl");
  size_t rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto damaged = bytes;
    damaged[i] ^= 0xA5;
    testing::MemoryPageStore store;
    MemorySource source(damaged);
    auto image = ImportSaveStream(source, store, ReadOptions{});
    if (!image) {
      ++rejected;
      continue;
    }
    // Whatever was accepted must export to a stream the reader accepts again.
    VectorSink out;
    REQUIRE(ExportSaveStream(*image, store, out).ok());
    StreamVisitor v;
    REQUIRE(Parse(out.data(), v).ok());
  }
  // Page data and record bodies are opaque, so most flips are legal; header and framing bytes are not.
  CHECK(rejected > 200);
}

TEST_CASE("the writer refuses batches Xen would reject", "[xen]") {
  VectorSink sink;
  StreamWriter w(sink);
  std::vector<uint8_t> page(kPageSize, 1);
  std::vector<PageEntry> none;
  CHECK(w.WritePageBatch(none).code() == StatusCode::kInvalidArgument);
  std::vector<PageEntry> many(1025, PageEntry{0, PageType::kXtab, nullptr});
  for (size_t i = 0; i < many.size(); ++i) many[i].pfn = i;
  CHECK(w.WritePageBatch(many).code() == StatusCode::kInvalidArgument);
  PageEntry xtab_with_data{1, PageType::kXtab, page.data()};
  CHECK(w.WritePageBatch({&xtab_with_data, 1}).code() == StatusCode::kInvalidArgument);
  PageEntry normal_without_data{1, PageType::kNormal, nullptr};
  CHECK(w.WritePageBatch({&normal_without_data, 1}).code() == StatusCode::kInvalidArgument);
  PageEntry dup[2] = {{3, PageType::kNormal, page.data()}, {3, PageType::kNormal, page.data()}};
  CHECK(w.WritePageBatch(dup).code() == StatusCode::kInvalidArgument);
  CHECK(sink.data().empty());
  many.resize(1024);
  CHECK(w.WritePageBatch(many).ok());
  CHECK(sink.data().size() == kRecordHeaderSize + kPageDataHeaderSize + 8 * 1024);
}

TEST_CASE("the state blob round-trips and rejects every truncation and a wrong version", "[xen]") {
  testing::MemoryPageStore store;
  XenSaveImage image = Import(Vector("hvm-optional-records.xl"), store);
  std::vector<uint8_t> blob = EncodeXenState(image);
  auto decoded = DecodeXenState(blob);
  REQUIRE(decoded.has_value());
  CHECK(*decoded == image);
  for (size_t len = 0; len < blob.size(); ++len) {
    auto r = DecodeXenState(std::span<const uint8_t>(blob.data(), len));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kCorrupt);
  }
  auto extra = blob;
  extra.push_back(0);
  CHECK_FALSE(DecodeXenState(extra).has_value());
  blob[8] = 2;  // version
  CHECK(DecodeXenState(blob).error().code() == StatusCode::kUnsupported);
}

TEST_CASE("the HVM context parser finds the vCPU registers", "[xen]") {
  testing::MemoryPageStore store;
  XenSaveImage image = Import(Vector("hvm-basic.xl"), store);
  const KeptRecord* ctx = nullptr;
  for (const auto& r : image.libxc_records) {
    if (r.type == kLibxcHvmContext) ctx = &r;
  }
  REQUIRE(ctx != nullptr);
  auto summary = ParseHvmContext(ctx->body);
  REQUIRE(summary.has_value());
  CHECK(summary->descriptors == 3);
  CHECK(summary->gtsc_khz == 2400000);
  REQUIRE(summary->vcpus.size() == 1);
  CHECK(summary->vcpus[0].cr3 == 0x1000);
  CHECK(summary->vcpus[0].efer == 0xD01);
  for (size_t len = 0; len < ctx->body.size(); ++len) {
    CHECK_FALSE(ParseHvmContext(std::span<const uint8_t>(ctx->body.data(), len)).has_value());
  }
}

TEST_CASE("OrderLikeXen417 turns a v2 stream into a v3 one with STATIC_DATA_END", "[xen]") {
  testing::MemoryPageStore store;
  XenSaveImage image = Import(Vector("hvm-v2-no-static-data-end.xl"), store);
  CHECK(image.libxc.version == 2);
  OrderLikeXen417(&image);
  VectorSink out;
  REQUIRE(ExportSaveStream(image, store, out).ok());
  testing::MemoryPageStore store2;
  XenSaveImage again = Import(out.data(), store2);
  CHECK(again.libxc.version == 3);
  REQUIRE(again.libxc_records.front().type == kLibxcStaticDataEnd);
  CHECK(again.libxc_records.front().page_batches_before == 0);
  CHECK(store2.State() == store.State());
}

TEST_CASE("OrderLikeXen417 reproduces the order of a Xen 4.17 save", "[xen]") {
  testing::MemoryPageStore store;
  auto bytes = Vector("hvm-basic.xl");
  XenSaveImage image = Import(bytes, store);
  XenSaveImage shuffled = image;
  std::reverse(shuffled.libxc_records.begin(), shuffled.libxc_records.end());
  std::reverse(shuffled.libxl_records.begin(), shuffled.libxl_records.end());
  OrderLikeXen417(&shuffled);
  CHECK(shuffled == image);
}

TEST_CASE("PageLayout keeps runs and drops superseded entries", "[xen]") {
  PageLayout layout;
  for (uint64_t pfn = 0; pfn < 2500; ++pfn) layout.AppendEntry(pfn, pfn == 100 ? PageType::kXtab : PageType::kNormal);
  REQUIRE(layout.batch_count() == 3);
  CHECK(layout.batch(0).size() == 3);  // [0,100) normal, 100 XTAB, [101,1024) normal
  CHECK(layout.entry_count() == 2500);
  PageEntry again[2] = {{5, PageType::kNormal, nullptr}, {2499, PageType::kXtab, nullptr}};
  layout.AddBatch(again);
  layout.DropSupersededEntries();
  CHECK(layout.batch_count() == 4);
  CHECK(layout.entry_count() == 2500);
  CHECK(layout.batch(0).size() == 4);  // 5 now lives in the last batch
  CHECK(layout.batch(3).size() == 2);
}

TEST_CASE("a raised pfn limit reads large batches and export splits them to 1024", "[xen]") {
  auto bytes = Vector("page-data-count-1025.xl");
  ReadOptions o;
  o.max_pfns_per_record = 4096;
  MemorySource source(bytes);
  testing::MemoryPageStore store;
  auto image = ImportSaveStream(source, store, o);
  REQUIRE(image.has_value());
  VectorSink out;
  REQUIRE(ExportSaveStream(*image, store, out).ok());
  testing::DumpVisitor dump;
  REQUIRE(Parse(out.data(), dump).ok());
  CHECK_THAT(dump.text(), Catch::Contains("count=1024") && Catch::Contains("count=1\n"));
}

TEST_CASE("a small synthetic image round-trips byte for byte", "[xen]") {
  XenSaveImage image = testing::MakeSynthImage(3000);
  testing::SynthPageSource synth;
  VectorSink first;
  REQUIRE(ExportSaveStream(image, synth, first).ok());
  testing::MemoryPageStore store;
  XenSaveImage imported = Import(first.data(), store);
  CHECK(imported == image);
  VectorSink second;
  REQUIRE(ExportSaveStream(imported, store, second).ok());
  CHECK(second.data() == first.data());
}

TEST_CASE("ParseStreamFromMemory detects the layer", "[xen]") {
  for (const char* name : {"hvm-basic.xl", "hvm-basic.libxl", "hvm-basic.libxc"}) {
    auto bytes = Vector(name);
    StreamVisitor v;
    CHECK(ParseStreamFromMemory(bytes.data(), bytes.size(), v).ok());
  }
  StreamVisitor v;
  const uint8_t junk[16] = {1, 2, 3};
  CHECK(ParseStreamFromMemory(junk, sizeof junk, v).code() == StatusCode::kCorrupt);
}
