// Fuzz target: the hint and trace file parsers (format-spec/hint-files.md): ParseAccessTrace, ParseVaHints,
// ParseReplayTrace.
//
// Input: u8 selector (bit 0: include a region called "ram", which unqualified pages then name), u8 length and
// that many bytes of one more region name (printable ASCII, as the format allows), then the text.
// All three parsers run on the text. Every page they return lies inside its region; address spaces of VA hints
// count up from 0 without gaps; and an access trace survives FormatAccessTrace and parsing again, whatever the
// region names hold (spaces, '#' and '%' are escaped as %XX, hint-files.md 1.1).
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "halite/hint_files.h"

namespace {

using namespace halite;

std::vector<Region> Regions(bool with_ram, const std::string& extra) {
  std::vector<Region> rs;
  auto add = [&](std::string name, uint64_t pages) {
    uint64_t first = rs.empty() ? 0 : rs.back().first_page + rs.back().page_count();
    rs.push_back(Region{std::move(name), 0, pages * 4096, 4096, first});
  };
  add("pc.ram", 300);
  if (with_ram) add("ram", 1000);
  add("0000:00:02.0/vga.vram", 16);
  add("a:b", 1);
  add("/rom@etc/acpi/tables", 32);
  bool duplicate = false;
  for (const auto& r : rs) duplicate |= r.name == extra;
  if (!duplicate) add(extra, 8);
  return rs;
}

void CheckRuns(const std::vector<PageRun>& runs, const std::vector<Region>& rs, bool spaces) {
  uint32_t space = 0;
  for (const auto& r : runs) {
    FUZZ_CHECK(r.first.region < rs.size());
    FUZZ_CHECK(r.count >= 1);
    FUZZ_CHECK(r.first.page < rs[r.first.region].page_count());
    FUZZ_CHECK(r.count <= rs[r.first.region].page_count() - r.first.page);
    if (spaces) {
      FUZZ_CHECK(r.address_space == space || r.address_space == space + 1);
      space = r.address_space;
    } else {
      FUZZ_CHECK(r.address_space == 0);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  const bool with_ram = in.Bool();
  std::string extra = in.Printable(1, in.U8() % 24 + 1);
  const auto regions = Regions(with_ram, extra);
  auto rest = in.Rest();
  std::string_view text(reinterpret_cast<const char*>(rest.data()), rest.size());

  auto access = ParseAccessTrace(text, "trace.txt", regions);
  if (access) CheckRuns(*access, regions, false);
  if (access) {
    // Round trip through the writer of trace files (bounded expansion).
    std::vector<PageRef> pages;
    for (const auto& r : *access) {
      for (uint64_t i = 0; i < r.count && pages.size() < 100000; ++i) pages.push_back({r.first.region, r.first.page + i});
    }
    auto again = ParseAccessTrace(FormatAccessTrace(pages, regions), "formatted.txt", regions);
    FUZZ_CHECK_MSG(again.has_value(), again.error().ToString());
    FUZZ_CHECK(again->size() == pages.size());
    for (size_t i = 0; i < pages.size(); ++i) FUZZ_CHECK((*again)[i].first == pages[i] && (*again)[i].count == 1);
  }
  if (!access) {
    FUZZ_CHECK(access.error().code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(access.error().message().rfind("trace.txt:", 0) == 0);
  }

  auto va = ParseVaHints(text, "va.txt", regions);
  if (va) {
    CheckRuns(*va, regions, true);
    if (!va->empty()) FUZZ_CHECK(va->front().address_space == 0);
    // Without blank lines the VA parser and the access parser agree.
    if (access) {
      FUZZ_CHECK(va->size() == access->size());
      for (size_t i = 0; i < va->size(); ++i) {
        FUZZ_CHECK((*va)[i].first == (*access)[i].first && (*va)[i].count == (*access)[i].count);
      }
    }
  } else {
    FUZZ_CHECK(va.error().code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(!access.has_value());  // the same lines, so the same verdict
  }

  auto replay = ParseReplayTrace(text, "replay.txt", regions);
  if (replay) {
    for (const auto& a : *replay) {
      FUZZ_CHECK(a.page.region < regions.size() && a.page.page < regions[a.page.region].page_count());
    }
  } else {
    FUZZ_CHECK(replay.error().code() == StatusCode::kInvalidArgument);
  }
  return 0;
}
