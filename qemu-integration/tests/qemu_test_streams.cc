#include "qemu_test_streams.h"

#include <cstring>
#include <utility>

#include "halite/bytes.h"
#include "halite/qemu/qemu_stream_input.h"

namespace halite::qemu::testing {
namespace {

constexpr uint32_t kRamId = 2;

void SectionHeader(std::string* s, uint8_t tag, uint32_t id, const std::string& name, uint32_t inst, uint32_t ver) {
  PutU8(s, tag);
  PutBe32(s, id);
  PutU8(s, static_cast<uint8_t>(name.size()));
  *s += name;
  PutBe32(s, inst);
  PutBe32(s, ver);
}
void Footer(std::string* s, uint32_t id) {
  PutU8(s, 0x7e);
  PutBe32(s, id);
}

void Page(std::string* s, uint32_t block, uint64_t page, bool cont) {
  static const char* kNames[] = {"pc.ram", "pc.bios"};
  const bool zero = SamplePageIsZero(block, page);
  PutBe64(s, page * 4096 | (zero ? 0x02 : 0x08) | (cont ? 0x20 : 0));
  if (!cont) {
    PutU8(s, static_cast<uint8_t>(strlen(kNames[block])));
    *s += kNames[block];
  }
  if (zero) {
    PutU8(s, 0);
  } else {
    s->append(4096, static_cast<char>(SamplePageByte(block, page)));
  }
}

}  // namespace

uint8_t SamplePageByte(uint32_t block, uint64_t page) { return static_cast<uint8_t>(0x10 * (block + 1) + page); }
bool SamplePageIsZero(uint32_t block, uint64_t page) { return block == 0 && page % 4 == 0; }

std::string SampleDeviceState() {
  std::string d;
  SectionHeader(&d, 0x04, 3, "timer", 0, 2);
  PutBe64(&d, 0x1122334455667788ull);
  PutBe64(&d, 0);
  Footer(&d, 3);
  SectionHeader(&d, 0x04, 4, "cpu_common", 0, 1);
  // Bytes that look like an EOF + VMDESC header must not confuse the tail split.
  PutU8(&d, 0x00);
  PutU8(&d, 0x06);
  PutBe32(&d, 5);
  Footer(&d, 4);
  return d;
}

std::string SampleVmdesc() { return R"({"page_size": 4096, "devices": [{"name": "timer"}]})"; }

std::string BuildSampleStream(const SampleStreamOptions& o) {
  std::string s;
  PutBe32(&s, 0x5145564d);
  PutBe32(&s, 3);
  PutU8(&s, 0x07);
  PutBe32(&s, 13);
  s += "pc-i440fx-7.2";
  if (o.capabilities_subsection) {
    PutU8(&s, 0x05);
    const std::string sub = "configuration/capabilities";
    PutU8(&s, static_cast<uint8_t>(sub.size()));
    s += sub;
    PutBe32(&s, 1);
    PutBe32(&s, 1);
    PutU8(&s, 15);
    s += "x-ignore-shared";
  }
  SectionHeader(&s, 0x01, kRamId, "ram", 0, 4);
  PutBe64(&s, (18 * 4096) | 0x04);
  PutU8(&s, 6);
  s += "pc.ram";
  PutBe64(&s, 16 * 4096);
  if (o.capabilities_subsection) PutBe64(&s, 0);
  PutU8(&s, 7);
  s += "pc.bios";
  PutBe64(&s, 2 * 4096);
  if (o.capabilities_subsection) PutBe64(&s, 0x100000);
  PutBe64(&s, 0x10);
  Footer(&s, kRamId);

  // Pages in arrival order; CONTINUE whenever the block is the previous record's, across sections too.
  std::vector<std::pair<uint32_t, uint64_t>> order;
  if (o.scan_jump) {
    // The guest wrote page 5 while the scan was at page 2: QEMU saves 5 next and scans on from there,
    // reaching the not-yet-saved 2..4 only after wrapping around past pc.bios.
    for (uint64_t p : {0, 1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) order.emplace_back(0, p);
    order.emplace_back(1, 0);
    order.emplace_back(1, 1);
    for (uint64_t p : {2, 3, 4}) order.emplace_back(0, p);
  } else {
    for (uint64_t p = 0; p < 16; ++p) order.emplace_back(0, p);
    order.emplace_back(1, 0);
    order.emplace_back(1, 1);
  }
  const size_t cuts[] = {0, 10, 17, 18};  // three sections: 10 pages, 7 pages, 1 page
  int last_block = -1;
  for (int sec = 0; sec < 3; ++sec) {
    const bool last = sec == 2;
    PutU8(&s, last && o.with_ram_end ? 0x03 : 0x02);
    PutBe32(&s, kRamId);
    for (size_t i = cuts[sec]; i < cuts[sec + 1]; ++i) {
      Page(&s, order[i].first, order[i].second, static_cast<int>(order[i].first) == last_block);
      last_block = static_cast<int>(order[i].first);
    }
    PutBe64(&s, 0x10);
    Footer(&s, kRamId);
  }

  s += SampleDeviceState();
  PutU8(&s, 0x00);
  if (o.with_vmdesc) {
    PutU8(&s, 0x06);
    const std::string j = SampleVmdesc();
    PutBe32(&s, static_cast<uint32_t>(j.size()));
    s += j;
  }
  return s;
}

std::string BuildSampleReturnPath() {
  std::string s;
  PutBe16(&s, 2);
  PutBe16(&s, 4);
  PutBe32(&s, 7);
  PutBe16(&s, 3);
  PutBe16(&s, 13 + 6);
  PutBe64(&s, 0x3000);
  PutBe32(&s, 0x1000);
  PutU8(&s, 6);
  s += "pc.ram";
  PutBe16(&s, 4);
  PutBe16(&s, 12);
  PutBe64(&s, 0x5000);
  PutBe32(&s, 0x1000);
  PutBe16(&s, 1);
  PutBe16(&s, 4);
  PutBe32(&s, 0);
  return s;
}

}  // namespace halite::qemu::testing
