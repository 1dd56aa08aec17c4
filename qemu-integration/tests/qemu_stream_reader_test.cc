#include <cstring>
#include <catch2/catch.hpp>
#include <map>

#include <fmt/format.h>

#include "halite/bytes.h"
#include "halite/qemu/qemu_stream_reader.h"
#include "qemu_test_streams.h"

namespace halite::qemu {
namespace {

using testing::BuildSampleStream;
using testing::SampleStreamOptions;

struct Collect : MigrationStreamHandler {
  std::vector<RamBlockInfo> blocks;
  std::map<std::pair<uint32_t, uint64_t>, std::string> pages;  // "" for a zero page
  Status OnRamBlocks(const std::vector<RamBlockInfo>& b) override {
    blocks = b;
    return Status::Ok();
  }
  Status OnPage(const PageRecord& r) override {
    pages[{r.id.block, r.id.page}] = r.is_zero ? std::string() : std::string(reinterpret_cast<const char*>(r.data), 4096);
    return Status::Ok();
  }
};

Status Parse(const std::string& bytes, Collect* c = nullptr, MigrationStreamReader** out = nullptr, size_t chunk = SIZE_MAX) {
  static Collect dummy;
  MemorySource src(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), chunk);
  MigrationStreamReader reader(&src, c ? c : &dummy);
  Status s = reader.Run();
  (void)out;
  return s;
}

TEST_CASE("reader parses a hand-built stream", "[reader]") {
  const std::string bytes = BuildSampleStream();
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}, SIZE_MAX}) {
    Collect c;
    MemorySource src(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), chunk);
    MigrationStreamReader reader(&src, &c);
    REQUIRE(reader.Run().ok());
    const SavedVmState& st = reader.state();
    REQUIRE(st.machine_type == "pc-i440fx-7.2");
    REQUIRE(st.configuration.size() == 1 + 4 + 13);
    REQUIRE(st.ram_section_id == 2);
    REQUIRE(st.ram_version_id == 4);
    REQUIRE(st.ram_blocks.size() == 2);
    REQUIRE(st.ram_blocks[0].name == "pc.ram");
    REQUIRE(st.ram_blocks[0].used_length == 16 * 4096);
    REQUIRE(st.ram_blocks[1].name == "pc.bios");
    REQUIRE(c.blocks == st.ram_blocks);
    REQUIRE(c.pages.size() == 18);
    for (const auto& [id, data] : c.pages) {
      if (testing::SamplePageIsZero(id.first, id.second)) {
        REQUIRE(data.empty());
      } else {
        REQUIRE(data == std::string(4096, static_cast<char>(testing::SamplePageByte(id.first, id.second))));
      }
    }
    REQUIRE(st.device_state == testing::SampleDeviceState());
    REQUIRE(st.vmdesc == testing::SampleVmdesc());
    REQUIRE(reader.MissingPages().empty());
    REQUIRE(reader.stats().duplicate_pages == 0);
    REQUIRE(reader.stats().zero_pages == 4);
    REQUIRE(reader.stats().ram_sections == 4);
    REQUIRE(reader.stats().ram_end_seen);
    REQUIRE(reader.out_of_order_pages().empty());
    REQUIRE(reader.arrival_order().size() == 18);
    REQUIRE(reader.stats().bytes == bytes.size());
  }
}

TEST_CASE("reader finds scan jumps of a background snapshot", "[reader]") {
  SampleStreamOptions o;
  o.scan_jump = true;
  o.with_ram_end = false;
  const std::string bytes = BuildSampleStream(o);
  Collect c;
  MemorySource src(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  MigrationStreamReader reader(&src, &c);
  REQUIRE(reader.Run().ok());
  REQUIRE_FALSE(reader.stats().ram_end_seen);
  // Only the written page is a jump: 6..15 continue the scan from it, 2..4 are reached by wrapping around.
  REQUIRE(reader.out_of_order_pages() == std::vector<PageId>{PageId{0, 5}});
  REQUIRE(reader.MissingPages().empty());
  REQUIRE(reader.state().device_state == testing::SampleDeviceState());
}

TEST_CASE("reader accepts a stream without VMDESC and with x-ignore-shared", "[reader]") {
  SampleStreamOptions o;
  o.with_vmdesc = false;
  o.capabilities_subsection = true;
  const std::string bytes = BuildSampleStream(o);
  Collect c;
  MemorySource src(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  MigrationStreamReaderOptions opts;
  opts.require_vmdesc = false;
  MigrationStreamReader reader(&src, &c, opts);
  REQUIRE(reader.Run().ok());
  REQUIRE(reader.state().vmdesc.empty());
  {
    // By default a stream must end with VMDESC: without it a truncated device state cannot be told apart.
    MemorySource src2(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    MigrationStreamReader strict(&src2, &c);
    REQUIRE(strict.Run().message().find("stream truncated?") != std::string::npos);
  }
  REQUIRE(reader.state().device_state == testing::SampleDeviceState());
  REQUIRE(c.pages.size() == 18);
  // The configuration is kept byte-exact, subsection included.
  REQUIRE(bytes.compare(8, reader.state().configuration.size(), reader.state().configuration) == 0);
}

// Offsets into the sample stream (see qemu_test_streams.cc).
constexpr size_t kConfigAt = 8;
constexpr size_t kRamStartAt = kConfigAt + 18;
constexpr size_t kBlockListAt = kRamStartAt + 1 + 4 + 1 + 3 + 4 + 4;        // the MEM_SIZE be64
constexpr size_t kFirstPartAt = kBlockListAt + 8 + 7 + 8 + 8 + 8 + 8 + 5;  // after EOS + footer
constexpr size_t kFirstRecordAt = kFirstPartAt + 5;

void ExpectError(std::string bytes, StatusCode code, const std::string& fragment) {
  Status s = Parse(bytes);
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  REQUIRE(s.code() == code);
  REQUIRE(s.message().find(fragment) != std::string::npos);
}

TEST_CASE("reader rejects each violation with a clear message", "[reader]") {
  const std::string good = BuildSampleStream();
  REQUIRE(static_cast<uint8_t>(good[kRamStartAt]) == 0x01);
  REQUIRE(static_cast<uint8_t>(good[kFirstPartAt]) == 0x02);

  std::string b = good;
  b[0] = 'X';
  ExpectError(b, StatusCode::kCorrupt, "migration stream: offset 0x0: magic 0x5845564d (expected 0x5145564d");
  b = good;
  b[7] = 2;
  ExpectError(b, StatusCode::kUnsupported, "stream version 2");
  b = good;
  b[kConfigAt] = 0x42;
  ExpectError(b, StatusCode::kCorrupt, "unknown record tag 0x42");
  b = good;
  b[kFirstPartAt - 5] = 0x11;  // the START section's footer byte
  ExpectError(b, StatusCode::kCorrupt, "offset 0x" + [] { char t[16]; snprintf(t, 16, "%zx", kFirstPartAt - 5); return std::string(t); }() +
                                           ": section 2 footer 0x11 (expected 0x7e)");
  b = good;
  b[kFirstPartAt - 1] = 9;  // footer names another section
  ExpectError(b, StatusCode::kCorrupt, "footer names section 9");
  b = good;
  b[kFirstRecordAt + 7] = 0x48;  // PAGE | XBZRLE
  ExpectError(b, StatusCode::kUnsupported, "XBZRLE (turn off the xbzrle capability)");
  b = good;
  b[kFirstRecordAt + 6] = 0x01;  // COMPRESS_PAGE
  ExpectError(b, StatusCode::kUnsupported, "COMPRESS_PAGE");
  b = good;
  b[kFirstRecordAt + 7] = 0x0a;  // ZERO | PAGE
  ExpectError(b, StatusCode::kCorrupt, "expected exactly one of");
  b = good;
  b[kFirstRecordAt + 7] = 0x22;  // ZERO | CONTINUE on the stream's first page record
  ExpectError(b, StatusCode::kCorrupt, "CONTINUE record with no previous block");
  b = good;
  b[kFirstRecordAt + 10] = 'X';  // block name "pX.ram"
  ExpectError(b, StatusCode::kCorrupt, "unknown RAMBlock 'pX.ram'");
  b = good;
  b[kFirstRecordAt + 5] = 0x10;  // offset 0x100000: beyond pc.ram's 16 pages
  ExpectError(b, StatusCode::kCorrupt, "page offset 0x100000 beyond RAMBlock pc.ram");
  b = good;
  b[kFirstPartAt + 4] = 7;  // PART for section 7
  ExpectError(b, StatusCode::kCorrupt, "PART section id 7 (expected the RAM section's id 2)");
  b = good;
  b[kRamStartAt + 6] = 'X';  // START of "Xam"
  ExpectError(b, StatusCode::kUnsupported, "iterative section 'Xam'");
  b = good;
  b[kBlockListAt + 5] = 0x00;  // announced total (0x1000) smaller than pc.ram
  b[kBlockListAt + 6] = 0x10;
  ExpectError(b, StatusCode::kCorrupt, "overruns the announced total");
  b = good;
  b.pop_back();  // VMDESC JSON cut: no valid tail
  ExpectError(b, StatusCode::kCorrupt, "do not end with EOF (0x00) + VMDESC");
  ExpectError(good.substr(0, kFirstPartAt + 100), StatusCode::kCorrupt, "unexpected end of stream reading page data");
  ExpectError(good.substr(0, kFirstPartAt), StatusCode::kCorrupt, "stream ended without an EOF record");
  b = good.substr(0, kRamStartAt);
  b.push_back(0);
  ExpectError(b, StatusCode::kCorrupt, "EOF before any RAM section");
}

// The sample stream with its MEM_SIZE total and pc.ram's used length raised by `extra` bytes (pc.ram is the
// first block: name length at kBlockListAt + 8, used length after its 6-byte name).
std::string WithBiggerPcRam(uint64_t extra) {
  std::string b = BuildSampleStream();
  auto add_be64 = [&](size_t at, uint64_t v) {
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x = x << 8 | static_cast<uint8_t>(b[at + i]);
    x += v;
    for (int i = 7; i >= 0; --i, x >>= 8) b[at + i] = static_cast<char>(x & 0xff);
  };
  add_be64(kBlockListAt, extra);
  add_be64(kBlockListAt + 1 + 6 + 1, extra);
  return b;
}

TEST_CASE("reader refuses a RAM total over its limit before sizing anything by it", "[reader][limits]") {
  // The fuzzer's find (fuzz/regressions/qemu_stream_fuzz/mem-size-2e52-page-bitmap): 2^52 bytes announced
  // would have cost a 2^37-byte page bitmap.
  const std::string huge = WithBiggerPcRam(uint64_t{1} << 52);
  Status s = Parse(huge);
  INFO(s.ToString());
  REQUIRE(s.code() == StatusCode::kCorrupt);
  CHECK_THAT(s.message(), Catch::Contains("migration stream: offset 0x" + fmt::format("{:x}", kBlockListAt)) &&
                              Catch::Contains("MEM_SIZE announces 0x10000000012000 bytes of RAM, over the limit of "
                                              "0x80000000000"));
  // Exactly at the default limit is accepted as far as the list goes (the pages then do not all arrive).
  const uint64_t sample_total = (16 + 2) * 4096;
  s = Parse(WithBiggerPcRam(kMaxStreamRamBytes - sample_total));
  INFO(s.ToString());
  CHECK(s.message().find("over the limit") == std::string::npos);

  // A caller that knows the guest's size (SaveFromQemu: `info ramblock`) sets a lower limit.
  const std::string good = BuildSampleStream();
  for (uint64_t limit : {sample_total - 4096, sample_total}) {
    Collect c;
    MemorySource src(std::span(reinterpret_cast<const uint8_t*>(good.data()), good.size()));
    MigrationStreamReaderOptions o;
    o.max_ram_bytes = limit;
    MigrationStreamReader reader(&src, &c, o);
    Status r = reader.Run();
    INFO(r.ToString());
    if (limit < sample_total) {
      CHECK(r.code() == StatusCode::kCorrupt);
      CHECK_THAT(r.message(), Catch::Contains("MEM_SIZE announces 0x12000 bytes of RAM, over the limit of 0x11000"));
      CHECK(c.blocks.empty());
    } else {
      CHECK(r.ok());
    }
  }
}

TEST_CASE("reader refuses more than 4096 RAMBlocks as it reads them", "[reader][limits]") {
  // A MEM_SIZE list of 5000 one-page blocks: refused at the 4097th, not after reading (and comparing) them all.
  std::string b = BuildSampleStream().substr(0, kBlockListAt);
  PutBe64(&b, 5000 * 4096 | 0x4);
  for (int i = 0; i < 5000; ++i) {
    const std::string name = "b" + std::to_string(i);
    PutU8(&b, static_cast<uint8_t>(name.size()));
    b += name;
    PutBe64(&b, 4096);
  }
  Status s = Parse(b);
  INFO(s.ToString());
  REQUIRE(s.code() == StatusCode::kCorrupt);
  CHECK_THAT(s.message(), Catch::Contains("more than 4096 RAMBlocks"));
}

TEST_CASE("reader's arrival order stops at twice the announced pages", "[reader][limits]") {
  // A PART section resending pc.ram's page 0 a hundred times before the sample's own pages: a live precopy
  // resends pages, a hostile source could forever.
  const std::string good = BuildSampleStream();
  std::string b = good.substr(0, kFirstPartAt);
  PutU8(&b, 0x02);
  PutBe32(&b, 2);
  for (int i = 0; i < 100; ++i) {
    PutBe64(&b, i == 0 ? 0x02 : 0x22);  // ZERO (then ZERO | CONTINUE) at offset 0
    if (i == 0) {
      PutU8(&b, 6);
      b += "pc.ram";
    }
    PutU8(&b, 0);
  }
  PutBe64(&b, 0x10);
  PutU8(&b, 0x7e);
  PutBe32(&b, 2);
  b += good.substr(kFirstPartAt);
  Collect c;
  MemorySource src(std::span(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
  MigrationStreamReader reader(&src, &c);
  Status s = reader.Run();
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(reader.stats().page_records == 118);
  CHECK(reader.stats().duplicate_pages == 100);
  CHECK(reader.arrival_order().size() == 2 * 18);
  CHECK(reader.stats().arrival_order_truncated);
  CHECK(reader.MissingPages().empty());
}

TEST_CASE("reader never crashes on corrupted or truncated streams", "[reader]") {
  const std::string good = BuildSampleStream();
  // Structural bytes live at the start, around section boundaries and in the tail; page data cannot break parsing.
  std::vector<size_t> positions;
  for (size_t i = 0; i < 400; ++i) positions.push_back(i);
  for (size_t i = good.size() - 300; i < good.size(); ++i) positions.push_back(i);
  for (size_t i = 400; i < good.size() - 300; i += 61) positions.push_back(i);
  for (size_t i : positions) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::string b = good;
      b[i] = static_cast<char>(b[i] ^ x);
      (void)Parse(b);  // any Status; must not crash or hang
    }
    Status s = Parse(good.substr(0, i));
    REQUIRE_FALSE(s.ok());
  }
}

TEST_CASE("device state tail split ignores look-alike bytes", "[reader]") {
  std::string dev, desc;
  std::string tail = testing::SampleDeviceState();
  tail.push_back(0);
  REQUIRE(SplitDeviceStateTail(tail, 0, "t", false, &dev, &desc).ok());
  REQUIRE(dev == testing::SampleDeviceState());
  REQUIRE(desc.empty());
  REQUIRE_FALSE(SplitDeviceStateTail(tail, 0, "t", true, &dev, &desc).ok());
  REQUIRE_FALSE(SplitDeviceStateTail("abc", 0, "t", false, &dev, &desc).ok());
}

}  // namespace
}  // namespace halite::qemu
