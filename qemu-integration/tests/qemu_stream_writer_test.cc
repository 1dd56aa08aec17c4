#include <cstring>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <thread>

#include "halite/qemu/qemu_stream_reader.h"
#include "halite/qemu/qemu_stream_writer.h"
#include "qemu_test_streams.h"

namespace halite::qemu {
namespace {

struct Pages : MigrationStreamHandler {
  std::map<std::pair<uint32_t, uint64_t>, std::string> pages;  // "" = zero
  Status OnPage(const PageRecord& r) override {
    pages[{r.id.block, r.id.page}] = r.is_zero ? std::string() : std::string(reinterpret_cast<const char*>(r.data), 4096);
    return Status::Ok();
  }
};

SavedVmState ParseSample(Pages* pages) {
  const std::string bytes = testing::BuildSampleStream();
  MemorySource src(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  MigrationStreamReader reader(&src, pages);
  REQUIRE(reader.Run().ok());
  return reader.TakeState();
}

TEST_CASE("writer's precopy stream reads back identically", "[writer]") {
  Pages in;
  const SavedVmState state = ParseSample(&in);
  VectorSink sink;
  MigrationStreamWriter w(&sink, &state);
  REQUIRE(w.WriteHeader().ok());
  REQUIRE(w.WriteConfiguration().ok());
  REQUIRE(w.WriteRamStart().ok());
  REQUIRE(w.BeginRamPart().ok());
  for (const auto& [id, data] : in.pages) {
    const PageId page{id.first, id.second};
    REQUIRE((data.empty() ? w.WriteZeroPage(page)
                          : w.WritePage(page, reinterpret_cast<const uint8_t*>(data.data()))).ok());
  }
  REQUIRE(w.EndRamSection().ok());
  REQUIRE(w.WriteRamEnd().ok());
  REQUIRE(w.WriteDeviceState().ok());
  REQUIRE(w.WriteEof().ok());
  REQUIRE(w.WriteVmdesc().ok());
  REQUIRE(w.pages_sent() == w.total_pages());

  Pages back;
  MemorySource src(sink.view());
  MigrationStreamReader reader(&src, &back);
  REQUIRE(reader.Run().ok());
  REQUIRE(back.pages == in.pages);
  REQUIRE(reader.state().ram_blocks == state.ram_blocks);
  REQUIRE(reader.state().configuration == state.configuration);
  REQUIRE(reader.state().device_state == state.device_state);
  REQUIRE(reader.state().vmdesc == state.vmdesc);
  REQUIRE(reader.state().ram_section_id == state.ram_section_id);
}

// Reads be-integers from a byte string for checking the postcopy layout.
struct Walk {
  const std::string& s;
  size_t pos = 0;
  uint64_t Get(int n) {
    REQUIRE(pos + n <= s.size());
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(s[pos + i]);
    pos += n;
    return v;
  }
  std::string Str(size_t n) {
    REQUIRE(pos + n <= s.size());
    std::string r = s.substr(pos, n);
    pos += n;
    return r;
  }
};

TEST_CASE("writer lays out the postcopy sequence QEMU 7.2 expects", "[writer]") {
  Pages in;
  const SavedVmState state = ParseSample(&in);
  VectorSink sink;
  MigrationStreamWriter w(&sink, &state, MigrationStreamWriterOptions{true, 4096});
  REQUIRE(w.WriteHeader().ok());
  REQUIRE(w.WriteConfiguration().ok());
  REQUIRE(w.WriteOpenReturnPath().ok());
  REQUIRE(w.WritePing(1).ok());
  REQUIRE(w.WritePostcopyAdvise(0x1000).ok());
  REQUIRE(w.WriteRamStart().ok());
  REQUIRE(w.WritePackaged(true, 9).code() == StatusCode::kInternal);  // no discard yet
  REQUIRE(w.WriteDiscardAll().ok());
  REQUIRE(w.WritePackaged(true, 9).ok());
  REQUIRE(w.WriteDeviceState().code() == StatusCode::kInternal);  // postcopy sends devices in the package
  REQUIRE(w.WritePage(PageId{0, 1}, reinterpret_cast<const uint8_t*>(in.pages.at({0, 1}).data())).code() ==
          StatusCode::kInternal);  // outside a section
  REQUIRE(w.BeginRamPart().ok());
  REQUIRE(w.WritePage(PageId{0, 1}, reinterpret_cast<const uint8_t*>(in.pages.at({0, 1}).data())).ok());
  REQUIRE(w.WriteZeroPage(PageId{0, 0}).ok());
  REQUIRE(w.WriteZeroPage(PageId{0, 0}).code() == StatusCode::kInternal);  // never twice
  REQUIRE(w.WriteZeroPage(PageId{0, 16}).code() == StatusCode::kInternal);  // outside the block
  REQUIRE(w.EndRamSection().ok());
  REQUIRE(w.WriteRamEnd().ok());
  REQUIRE(w.WriteEof().ok());

  const std::string out(sink.view());
  Walk k{out};
  REQUIRE(k.Get(4) == 0x5145564d);
  REQUIRE(k.Get(4) == 3);
  REQUIRE(k.Str(state.configuration.size()) == state.configuration);
  REQUIRE(k.Get(1) == 0x08);  // OPEN_RETURN_PATH
  REQUIRE(k.Get(2) == 1);
  REQUIRE(k.Get(2) == 0);
  REQUIRE(k.Get(1) == 0x08);  // PING 1
  REQUIRE(k.Get(2) == 2);
  REQUIRE(k.Get(2) == 4);
  REQUIRE(k.Get(4) == 1);
  REQUIRE(k.Get(1) == 0x08);  // ADVISE
  REQUIRE(k.Get(2) == 3);
  REQUIRE(k.Get(2) == 16);
  REQUIRE(k.Get(8) == 0x1000);
  REQUIRE(k.Get(8) == 0x1000);
  REQUIRE(k.Get(1) == 0x01);  // RAM START
  REQUIRE(k.Get(4) == state.ram_section_id);
  REQUIRE(k.Get(1) == 3);
  REQUIRE(k.Str(3) == "ram");
  REQUIRE(k.Get(4) == 0);
  REQUIRE(k.Get(4) == 4);
  REQUIRE(k.Get(8) == (18 * 4096 | 4));
  REQUIRE(k.Get(1) == 6);
  REQUIRE(k.Str(6) == "pc.ram");
  REQUIRE(k.Get(8) == 16 * 4096);
  REQUIRE(k.Get(1) == 7);
  REQUIRE(k.Str(7) == "pc.bios");
  REQUIRE(k.Get(8) == 2 * 4096);
  REQUIRE(k.Get(8) == 0x10);
  REQUIRE(k.Get(1) == 0x7e);
  REQUIRE(k.Get(4) == state.ram_section_id);
  for (const auto& b : state.ram_blocks) {  // one discard per block, the whole block
    REQUIRE(k.Get(1) == 0x08);
    REQUIRE(k.Get(2) == 6);
    REQUIRE(k.Get(2) == 3 + b.name.size() + 16);
    REQUIRE(k.Get(1) == 0);
    REQUIRE(k.Get(1) == b.name.size());
    REQUIRE(k.Str(b.name.size()) == b.name);
    REQUIRE(k.Get(1) == 0);
    REQUIRE(k.Get(8) == 0);
    REQUIRE(k.Get(8) == b.used_length);
  }
  REQUIRE(k.Get(1) == 0x08);  // PACKAGED
  REQUIRE(k.Get(2) == 7);
  REQUIRE(k.Get(2) == 4);
  const uint64_t pkg_len = k.Get(4);
  REQUIRE(pkg_len == 5 + state.device_state.size() + 9 + 5);
  REQUIRE(k.Get(1) == 0x08);
  REQUIRE(k.Get(2) == 4);  // LISTEN
  REQUIRE(k.Get(2) == 0);
  REQUIRE(k.Str(state.device_state.size()) == state.device_state);
  REQUIRE(k.Get(1) == 0x08);
  REQUIRE(k.Get(2) == 2);  // PING 9
  REQUIRE(k.Get(2) == 4);
  REQUIRE(k.Get(4) == 9);
  REQUIRE(k.Get(1) == 0x08);
  REQUIRE(k.Get(2) == 5);  // RUN
  REQUIRE(k.Get(2) == 0);
  REQUIRE(k.Get(1) == 0x02);  // PART
  REQUIRE(k.Get(4) == state.ram_section_id);
  REQUIRE(k.Get(8) == (0x1000 | 0x08));  // page 1, named
  REQUIRE(k.Get(1) == 6);
  REQUIRE(k.Str(6) == "pc.ram");
  k.pos += 4096;
  REQUIRE(k.Get(8) == (0x0 | 0x02 | 0x20));  // page 0, zero, CONTINUE
  REQUIRE(k.Get(1) == 0);
  REQUIRE(k.Get(8) == 0x10);
  REQUIRE(k.Get(1) == 0x7e);
  REQUIRE(k.Get(4) == state.ram_section_id);
  REQUIRE(k.Get(1) == 0x03);  // END
  REQUIRE(k.Get(4) == state.ram_section_id);
  REQUIRE(k.Get(8) == 0x10);
  REQUIRE(k.Get(1) == 0x7e);
  REQUIRE(k.Get(4) == state.ram_section_id);
  REQUIRE(k.Get(1) == 0x00);  // EOF
  REQUIRE(k.pos == out.size());
}

TEST_CASE("writer refuses a discard after pages and an oversized package", "[writer]") {
  Pages in;
  SavedVmState state = ParseSample(&in);
  VectorSink sink;
  MigrationStreamWriter w(&sink, &state);
  REQUIRE(w.WriteRamStart().code() == StatusCode::kInternal);  // before the header
  REQUIRE(w.WriteHeader().ok());
  REQUIRE(w.WriteConfiguration().ok());
  REQUIRE(w.WritePostcopyAdvise(0x1000).ok());
  REQUIRE(w.WriteRamStart().ok());
  REQUIRE(w.WriteDiscardAll().ok());
  REQUIRE(w.BeginRamPart().ok());
  REQUIRE(w.WriteZeroPage(PageId{0, 0}).ok());
  REQUIRE(w.EndRamSection().ok());
  REQUIRE(w.WriteDiscardAll().code() == StatusCode::kInternal);

  state.device_state.assign(17u << 20, 'x');
  VectorSink sink2;
  MigrationStreamWriter w2(&sink2, &state);
  REQUIRE(w2.WriteHeader().ok());
  REQUIRE(w2.WriteConfiguration().ok());
  REQUIRE(w2.WritePostcopyAdvise(0x1000).ok());
  REQUIRE(w2.WriteRamStart().ok());
  REQUIRE(w2.WriteDiscardAll().ok());
  Status s = w2.WritePackaged(false, 0);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message().find("16 MiB") != std::string::npos);
}

TEST_CASE("saved state encodes and decodes", "[writer]") {
  Pages in;
  const SavedVmState state = ParseSample(&in);
  const std::string blob = EncodeSavedVmState(state);
  auto back = DecodeSavedVmState(blob);
  REQUIRE(back.has_value());
  REQUIRE(EncodeSavedVmState(*back) == blob);
  REQUIRE(back->ram_blocks == state.ram_blocks);
  for (size_t cut = 0; cut < blob.size(); cut += 3) REQUIRE_FALSE(DecodeSavedVmState(blob.substr(0, cut)).has_value());
  REQUIRE_FALSE(DecodeSavedVmState(blob + "x").has_value());
  std::string v2 = blob;
  v2[4] = 2;
  REQUIRE(DecodeSavedVmState(v2).error().code() == StatusCode::kUnsupported);
}

TEST_CASE("RAMBlock compatibility check names the block and sizes", "[writer]") {
  std::vector<RamBlockInfo> saved{{"pc.ram", 0x4000000, 4096, 0}, {"/rom@etc/acpi/tables", 0x20000, 4096, 0}};
  std::vector<RamBlockInfo> dest{{"pc.ram", 0x4000000, 4096, 0x4000000},
                                 {"/rom@etc/acpi/tables", 0x10000, 4096, 0x200000}};
  REQUIRE(CheckRamBlocksCompatible(saved, dest).ok());  // the ACPI block is resizeable
  dest[0].used_length = dest[0].max_length = 0x8000000;
  Status s = CheckRamBlocksCompatible(saved, dest);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message() ==
          "destination RAMBlock pc.ram is 0x8000000 bytes, the checkpoint's is 0x4000000: start QEMU with the same -m "
          "and memory devices");
  dest.erase(dest.begin());
  REQUIRE(CheckRamBlocksCompatible(saved, dest).message().find("has no RAMBlock pc.ram") != std::string::npos);
}

}  // namespace
}  // namespace halite::qemu
