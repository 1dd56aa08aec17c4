// The checkpoint glue in-process: stream -> checkpoint -> stream, from a file and from a pipe, the page-table
// walk on a synthetic Linux-like guest, live-stream resends, holes, and every refusal leaving nothing behind.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/xen/xen_checkpoint.h"
#include "halite/xen/xen_stream_reader.h"
#include "xen_synth_guest.h"
#include "xen_test_dump.h"

using namespace halite;
using namespace halite::xen;

namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/hlt-xen-test.XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(f.good());
}

std::vector<uint8_t> Vector(const std::string& name) {
  return ReadFile(std::string(HALITE_XEN_VECTOR_DIR) + "/" + name);
}

SaveOptions Quiet() {
  SaveOptions o;
  o.writer.sink.sync = false;
  o.writer.threads = 2;
  return o;
}

Result<SaveResult> SaveFile(const std::string& in, const std::string& out, SaveOptions o = Quiet()) {
  int fd = ::open(in.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  o.read.source_name = in;
  auto r = SaveStreamToCheckpoint(fd, out, std::move(o));
  ::close(fd);
  return r;
}

// Feeds `bytes` through a pipe in odd-sized pieces, as `xl save` into a FIFO would.
Result<SaveResult> SavePipe(const std::vector<uint8_t>& bytes, const std::string& out, SaveOptions o = Quiet()) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::thread writer([&] {
    for (size_t off = 0; off < bytes.size();) {
      size_t n = std::min<size_t>(65521, bytes.size() - off);
      ssize_t put = ::write(fds[1], bytes.data() + off, n);
      if (put <= 0) break;  // the reader stopped early (a refused stream)
      off += size_t(put);
    }
    ::close(fds[1]);
  });
  o.read.source_name = "pipe";
  auto r = SaveStreamToCheckpoint(fds[0], out, std::move(o));
  ::close(fds[0]);
  writer.join();
  return r;
}

std::vector<uint8_t> Export(const std::string& ckpt, ExportOptions o = {}, ExportStats* stats = nullptr) {
  auto reader = CheckpointReader::Open(ckpt);
  INFO(reader.status().ToString());
  REQUIRE(reader);
  VectorSink sink;
  Status s = ExportCheckpointToStream(**reader, sink, o, stats);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return sink.Take();
}

std::vector<uint8_t> Synth(const testing::SynthLinuxGuest& guest, uint64_t pages) {
  VectorSink sink;
  testing::SynthGuestPageSource source(guest);
  REQUIRE(ExportSaveStream(testing::MakeSynthGuestImage(pages, guest.vcpus()), source, sink).ok());
  return sink.Take();
}

}  // namespace

TEST_CASE("xen checkpoint: a Linux-like guest round-trips from a file and a pipe, with its address spaces",
          "[xen][checkpoint]") {
  TempDir dir;
  const uint64_t pages = 32768;
  testing::SynthLinuxGuest guest(pages, 12);
  REQUIRE(guest.processes() == 12);
  const std::vector<uint8_t> stream = Synth(guest, pages);
  WriteFile(dir / "in.xl", stream);

  auto file = SaveFile(dir / "in.xl", dir / "file.hlt");
  INFO(file.status().ToString());
  REQUIRE(file);
  CHECK(file->format == StreamFormat::kXl);
  CHECK(file->region_pages == pages);
  const VaReport& va = file->va;
  INFO(va.skipped << " / " << va.notes);
  CHECK(va.skipped.empty());
  CHECK(va.vcpus == 2);
  CHECK(va.cpu_roots == 2);
  CHECK(va.pti_kernel_copies == 1);
  CHECK(va.scan_roots == guest.processes() - 2);
  CHECK(!va.truncated);
  CHECK(va.mapped_nonzero_small_pages == guest.small_mapped_pages());
  CHECK(va.mapped_nonzero_pages == va.nonzero_pages);  // the direct map covers all memory
  CHECK(va.nonzero_pages == file->data_pages);

  auto pipe = SavePipe(stream, dir / "pipe.hlt");
  INFO(pipe.status().ToString());
  REQUIRE(pipe);
  CHECK(pipe->va.mapped_nonzero_small_pages == va.mapped_nonzero_small_pages);

  // Same bytes back, through a cache far smaller than the guest too.
  ExportStats stats;
  CHECK(Export(dir / "file.hlt", {}, &stats) == stream);
  CHECK(stats.distinct_blocks == stats.blocks_read);
  CHECK(Export(dir / "pipe.hlt") == stream);
  ExportOptions tiny;
  tiny.cache_bytes = 1;
  CHECK(Export(dir / "file.hlt", tiny, &stats) == stream);
  CHECK(stats.blocks_read > stats.distinct_blocks);

  // The checkpoint's view: metadata, one region, the state blob, pages by kind.
  auto reader = CheckpointReader::Open(dir / "file.hlt");
  REQUIRE(reader);
  const CheckpointReader& r = **reader;
  CHECK(r.metadata().vmm_kind == VmmKind::kXen);
  CHECK(r.metadata().machine_type == kXenMachineType);
  REQUIRE(r.regions().size() == 1);
  CHECK(r.regions()[0].name == kXenRegionName);
  CHECK(r.regions()[0].size == pages * kPageSize);
  REQUIRE(r.ReadBlob(kXenStateBlobName));
  CHECK(r.Locate(0xA0).kind == PageKind::kAbsent);         // XTAB (the VGA hole)
  CHECK(r.Locate(4099 + 7).kind == PageKind::kZero);       // XALLOC
  CHECK(r.Locate(97 + 13).kind == PageKind::kZero);        // data, all zeros
  CHECK(r.Locate(0x5001).kind == PageKind::kStored);
  std::vector<uint8_t> page(kPageSize), want(kPageSize);
  for (uint64_t pfn : {uint64_t{0x1}, uint64_t{0x2800}, uint64_t{0x3fff}}) {
    REQUIRE(r.ReadPage(pfn, page).ok());
    guest.Page(pfn, want.data());
    CHECK(page == want);
  }
  CHECK(r.VerifyAll().ok());

  // Without the walk: the same pages, physical order.
  SaveOptions no_va = Quiet();
  no_va.va_walk = false;
  auto plain = SaveFile(dir / "in.xl", dir / "plain.hlt", no_va);
  REQUIRE(plain);
  CHECK(plain->va.runs == 0);
  CHECK(Export(dir / "plain.hlt") == stream);
}

TEST_CASE("xen checkpoint: every valid vector round-trips through a checkpoint", "[xen][checkpoint]") {
  TempDir dir;
  for (const char* name : {"hvm-basic.xl", "hvm-basic.libxl", "hvm-basic.libxc", "hvm-no-config.xl",
                           "hvm-v2-no-static-data-end.xl", "hvm-xenstore-data.xl", "hvm-optional-records.xl",
                           "hvm-live-resend.xl", "hvm-verify-copies.xl"}) {
    INFO(name);
    const std::vector<uint8_t> bytes = Vector(name);
    // The codec's own round trip (pages in memory) is the reference: same bytes, or for streams that resend
    // pages, each page once with its last copy.
    testing::MemoryPageStore store;
    MemorySource source(bytes);
    ReadOptions ro;
    ro.format = *DetectStreamFormat(bytes);
    auto image = ImportSaveStream(source, store, ro);
    REQUIRE(image);
    VectorSink want;
    REQUIRE(ExportSaveStream(*image, store, want).ok());

    auto saved = SavePipe(bytes, dir / "v.hlt");
    INFO(saved.status().ToString());
    REQUIRE(saved);
    CHECK(saved->format == ro.format);
    CHECK(Export(dir / "v.hlt") == want.data());
    // Holes and zero pages as the stream left them.
    auto reader = CheckpointReader::Open(dir / "v.hlt");
    REQUIRE(reader);
    for (const auto& [pfn, state] : store.State()) {
      PageKind kind = (*reader)->Locate(pfn).kind;
      if (state.first == PageType::kXtab || state.first == PageType::kBroken) {
        CHECK(kind == PageKind::kAbsent);
      } else if (state.first == PageType::kXalloc) {
        CHECK(kind == PageKind::kZero);
      } else {
        CHECK(kind != PageKind::kAbsent);
      }
    }
  }
}

TEST_CASE("xen checkpoint: damaged and refused streams leave no checkpoint", "[xen][checkpoint]") {
  TempDir dir;
  const std::string out = dir / "c.hlt";
  struct Case {
    const char* vector;
    StatusCode code;
  } cases[] = {
      {"truncated-page-data.xl", StatusCode::kCorrupt},   {"bad-padding-libxc.xl", StatusCode::kCorrupt},
      {"duplicate-pfn-in-record.xl", StatusCode::kCorrupt}, {"big-endian-libxc.xl", StatusCode::kUnsupported},
      {"pv-domain.xl", StatusCode::kUnsupported},         {"unknown-mandatory-libxc.xl", StatusCode::kUnsupported},
      {"xl-bad-magic.xl", StatusCode::kCorrupt},          {"trailing-bytes.xl", StatusCode::kCorrupt},
  };
  for (const Case& c : cases) {
    INFO(c.vector);
    auto r = SavePipe(Vector(c.vector), out);
    REQUIRE(!r);
    CHECK(r.error().code() == c.code);
    CHECK(r.error().message().find("pipe: ") == 0);  // names the input, then the record and offset
    CHECK(!Exists(out));
    WriteFile(dir / "in.xl", Vector(c.vector));
    auto f = SaveFile(dir / "in.xl", out);
    REQUIRE(!f);
    CHECK(f.error().code() == c.code);
    CHECK(!Exists(out));
  }
  // Every truncation of a valid stream.
  const std::vector<uint8_t> good = Vector("hvm-basic.xl");
  for (size_t n = 0; n < good.size(); n += 97) {
    auto r = SavePipe(std::vector<uint8_t>(good.begin(), good.begin() + n), out);
    REQUIRE(!r);
    CHECK(r.error().code() == StatusCode::kCorrupt);
    CHECK(!Exists(out));
  }
  // Garbage.
  auto g = SavePipe(std::vector<uint8_t>(5000, 0x5a), out);
  REQUIRE(!g);
  CHECK(g.error().code() == StatusCode::kCorrupt);
  CHECK(!Exists(out));
}

TEST_CASE("xen checkpoint: a physmap too large or too sparse for a checkpoint is refused", "[xen][checkpoint]") {
  TempDir dir;
  XenSaveImage image = testing::MakeSynthImage(16);
  // Rebuild the layout with one hole far away (XTAB entries carry no data: a cheap hostile stream).
  PageLayout layout;
  for (uint64_t pfn = 0; pfn < 16; ++pfn) layout.AppendEntry(pfn, testing::SynthType(pfn));
  layout.AppendEntry(uint64_t{1} << 31, PageType::kXtab);
  image.pages = layout;
  for (KeptRecord& r : image.libxc_records) {
    if (r.page_batches_before) r.page_batches_before = uint32_t(layout.batch_count());
  }
  testing::SynthPageSource synth;
  VectorSink sink;
  REQUIRE(ExportSaveStream(image, synth, sink).ok());
  auto r = SavePipe(sink.data(), dir / "c.hlt");
  REQUIRE(!r);
  CHECK(r.error().code() == StatusCode::kUnsupported);
  CHECK(!Exists(dir / "c.hlt"));

  layout = PageLayout();
  for (uint64_t pfn = 0; pfn < 16; ++pfn) layout.AppendEntry(pfn, testing::SynthType(pfn));
  layout.AppendEntry(uint64_t{1} << 16, PageType::kXtab);  // 256 MiB of physmap for 17 pfns
  image.pages = layout;
  VectorSink sparse;
  REQUIRE(ExportSaveStream(image, synth, sparse).ok());
  SaveOptions strict = Quiet();
  strict.max_sparse_region_pages = 1024;  // the default (2^22) would let this small case through
  r = SavePipe(sparse.data(), dir / "c.hlt", strict);
  REQUIRE(!r);
  CHECK(r.error().code() == StatusCode::kUnsupported);
  CHECK(r.error().message().find("sparse") != std::string::npos);
  SaveOptions roomy = Quiet();
  roomy.max_sparse_region_pages = uint64_t{1} << 17;
  auto ok = SavePipe(sparse.data(), dir / "c.hlt", roomy);
  INFO(ok.status().ToString());
  REQUIRE(ok);
  CHECK(ok->region_pages == (uint64_t{1} << 16) + 1);
  CHECK(Export(dir / "c.hlt") == sparse.data());
}

TEST_CASE("xen checkpoint: export refuses checkpoints that are not Xen's or disagree with their layout",
          "[xen][checkpoint]") {
  TempDir dir;
  auto make = [&](VmmKind kind, const char* region, uint64_t region_pages, const char* blob,
                  const std::vector<uint8_t>& blob_bytes, bool pages) {
    WriterOptions wo;
    wo.sink.sync = false;
    wo.metadata.vmm_kind = kind;
    auto w = CheckpointWriter::Create(dir / "x.hlt", wo);
    REQUIRE(w);
    auto reg = (*w)->AddRegion(region, 0, region_pages * kPageSize);
    REQUIRE(reg);
    std::vector<uint8_t> page(kPageSize);
    for (uint64_t pfn = 0; pages && pfn < region_pages; ++pfn) {
      testing::SynthPage(pfn, page.data());
      REQUIRE((*w)->PutPage(*reg, pfn, page).ok());
    }
    REQUIRE((*w)->AddBlob(blob, blob_bytes).ok());
    REQUIRE((*w)->Finish());
  };
  auto export_status = [&]() {
    auto reader = CheckpointReader::Open(dir / "x.hlt");
    REQUIRE(reader);
    VectorSink sink;
    return ExportCheckpointToStream(**reader, sink, {});
  };
  const std::vector<uint8_t> state = EncodeXenState(testing::MakeSynthImage(64));

  make(VmmKind::kRaw, "ram", 64, "xen.state", state, true);
  CHECK(export_status().code() == StatusCode::kInvalidArgument);
  make(VmmKind::kXen, "ram", 64, "xen.state", state, true);
  CHECK(export_status().code() == StatusCode::kCorrupt);  // no xen.physmap
  make(VmmKind::kXen, kXenRegionName, 64, "other", state, true);
  CHECK(export_status().code() == StatusCode::kCorrupt);  // no xen.state
  make(VmmKind::kXen, kXenRegionName, 64, kXenStateBlobName, {1, 2, 3}, true);
  Status s = export_status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("xen.state") != std::string::npos);
  make(VmmKind::kXen, kXenRegionName, 32, kXenStateBlobName, state, true);
  s = export_status();
  CHECK(s.code() == StatusCode::kCorrupt);  // the layout names pfns beyond the region
  CHECK(s.message().find("beyond region") != std::string::npos);
  make(VmmKind::kXen, kXenRegionName, 64, kXenStateBlobName, state, false);
  s = export_status();
  CHECK(s.code() == StatusCode::kCorrupt);  // pages with data in the layout, absent from the checkpoint
  CHECK(s.message().find("absent") != std::string::npos);
  make(VmmKind::kXen, kXenRegionName, 64, kXenStateBlobName, state, true);
  CHECK(export_status().ok());
}

// A synthetic guest whose xl config is `config` (NUL-terminated, as libxl stores it), exported as a save stream
// into `stream`, and saved to `out`.
Result<SaveResult> SaveWithConfig(const std::string& config, const std::string& out, VectorSink& stream) {
  XenSaveImage image = testing::MakeSynthImage(64);
  image.config.assign(config.begin(), config.end());
  image.config.push_back(0);
  testing::SynthPageSource synth;
  HLT_RETURN_IF_ERROR(ExportSaveStream(image, synth, stream));
  return SavePipe(stream.data(), out);
}

TEST_CASE("xen checkpoint: metadata takes the VM's UUID from the xl config", "[xen][checkpoint]") {
  TempDir dir;
  VectorSink sink;
  auto saved = SaveWithConfig(
      R"({"c_info":{"type":"hvm","name":"web1","uuid":"12345678-9abc-DEF0-1234-56789abcdef0"},"b_info":{}})",
      dir / "u.hlt", sink);
  REQUIRE(saved);
  auto reader = CheckpointReader::Open(dir / "u.hlt");
  REQUIRE(reader);
  const Uuid want = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0};
  CHECK((*reader)->metadata().vm_uuid == want);
  CHECK((*reader)->metadata().vmm_kind == VmmKind::kXen);
  CHECK(saved->va.skipped.find("paging is off") != std::string::npos);  // the synthetic vCPU is in real mode
  CHECK(Export(dir / "u.hlt") == sink.data());
}

TEST_CASE("xen checkpoint: the UUID is c_info's, read by a JSON parser, not the first text that looks like one",
          "[xen][checkpoint]") {
  TempDir dir;
  auto uuid_of = [&](const std::string& config) {
    VectorSink sink;
    REQUIRE(SaveWithConfig(config, dir / "v.hlt", sink));
    auto reader = CheckpointReader::Open(dir / "v.hlt");
    REQUIRE(reader);
    return (*reader)->metadata().vm_uuid;
  };
  // A string value and another object mention "uuid" before c_info does.
  const Uuid want = {0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89};
  CHECK(uuid_of(R"({"b_info":{"cmdline":"\"uuid\": \"11111111-2222-3333-4444-555555555555\"",)"
                R"("uuid":"99999999-9999-9999-9999-999999999999"},)"
                R"("c_info":{"name":"web2","uuid":"abcdef01-2345-6789-ABCD-ef0123456789"}})") == want);
  // Malformed UUIDs and configs that are not JSON record no UUID rather than a wrong one.
  CHECK(uuid_of(R"({"c_info":{"uuid":"abcdef0123456789abcdef0123456789abcd"}})") == Uuid{});
  CHECK(uuid_of(R"({"c_info":{"uuid":"abcdef01-2345-6789-ABCD-ef012345678g"}})") == Uuid{});
  CHECK(uuid_of(R"({"c_info":{"uuid":42}})") == Uuid{});
  CHECK(uuid_of(R"({"c_info":{"uuid":"abcdef01-2345-6789-ABCD-ef0123456789")") == Uuid{});
}
