#include "vectors/hint_vectors.h"

#include <fmt/format.h>

#include "halite/hint_files.h"

namespace halite::vectors {

std::vector<Region> HintVectorRegions() {
  std::vector<Region> rs;
  auto add = [&](std::string name, uint64_t pages) {
    uint64_t first = rs.empty() ? 0 : rs.back().first_page + rs.back().page_count();
    rs.push_back(Region{std::move(name), 0, pages * 4096, 4096, first});
  };
  add("pc.ram", 64);
  add("0000:00:02.0/vga.vram", 16);
  add("my region", 8);
  add("#1 bios", 4);
  add("50% off", 4);
  add("/rom@etc/acpi/tables", 2);
  return rs;
}

std::vector<HintVector> BuildHintVectors() {
  const std::vector<Region> rs = HintVectorRegions();
  std::vector<HintVector> v;
  // What libhalite's writer produces: one page of every region, then more pages of the escaped ones.
  std::vector<PageRef> pages;
  for (uint32_t r = 0; r < rs.size(); ++r) pages.push_back({r, rs[r].page_count() - 1});
  for (uint32_t r : {2u, 3u, 4u}) pages.push_back({r, 0});
  v.push_back({"valid/escaped-names.access-trace", HintKind::kAccessTrace, FormatAccessTrace(pages, rs), true, "",
               "FormatAccessTrace over regions named with a space, `#`, `%` and colons"});
  v.push_back({"valid/escaped-names.va-hints", HintKind::kVaHints,
               "# address space 1: escapes in either case, an escaped ordinary byte, counts\n"
               "my%20region:2 3\n"
               "%231%20bios:1\t2   # \"#1 bios\"\n"
               "50%25%20off:0x3\n"
               "\n"
               "# address space 2\n"
               "%6d%79%20region:7\n"
               "0000:00:02.0/vga.vram:15\n"
               "40 4\n",
               true, "", "VA hints: `%XX` in upper and lower case, an escaped ordinary letter, two address spaces"});
  v.push_back({"valid/escaped-names.replay-trace", HintKind::kReplayTrace,
               "my%20region:5 w\n"
               "%231%20bios:3 r\n"
               "50%25%20off:2\n"
               "pc.ram:0x10 w\n",
               true, "", "replay trace: reads and writes of escaped names"});
  v.push_back({"valid/version-1.0.access-trace", HintKind::kAccessTrace,
               "# a version 1.0 file (no escapes) reads the same in 1.1\n"
               "pc.ram:12\n"
               "pc.ram:8 16      # pages 8..23\n"
               "0000:00:02.0/vga.vram:3\n"
               "/rom@etc/acpi/tables:1\n"
               "0x20\n",
               true, "", "a 1.0 file: unescaped names with colons and slashes, an unqualified page"});
  auto invalid = [&](std::string name, HintKind kind, std::string text, std::string message, std::string why) {
    v.push_back({"invalid/" + std::move(name), kind, std::move(text), false, std::move(message), std::move(why)});
  };
  invalid("escape-short.access-trace", HintKind::kAccessTrace, "pc.ram:1\nmy%2:3\n",
          "escape-short.access-trace:2: bad escape \"%2\" in region name \"my%2\"",
          "a `%` followed by one hexadecimal digit");
  invalid("escape-not-hex.va-hints", HintKind::kVaHints, "50%zz:1\n", "bad escape \"%zz\"",
          "a `%` followed by non-hexadecimal characters");
  invalid("escape-at-end.replay-trace", HintKind::kReplayTrace, "my%20region%:1 w\n", "bad escape \"%\"",
          "a `%` as the last byte of the region");
  invalid("unescaped-space.access-trace", HintKind::kAccessTrace, "my region:3\n",
          "expected a positive page count, got \"region:3\"",
          "a region name with a raw space: two words");
  invalid("unescaped-hash.access-trace", HintKind::kAccessTrace, "#1 bios:0\n1%20bios:0\n",
          "unknown region \"1 bios\"", "a raw `#` starts a comment; `1%20bios` is not a region");
  invalid("escaped-unknown.access-trace", HintKind::kAccessTrace, "my%20regiom:1\n",
          "unknown region \"my regiom\"", "the decoded name must equal a region name exactly");
  return v;
}

std::string DescribeHints(HintKind kind, const std::string& text, const std::string& file_name) {
  const std::vector<Region> rs = HintVectorRegions();
  std::string out;
  auto describe_runs = [&](const Result<std::vector<PageRun>>& runs) {
    if (!runs) {
      out += "error: " + runs.error().ToString() + "\n";
      return;
    }
    for (const PageRun& r : *runs) {
      out += fmt::format("space {} region {} \"{}\" page {} count {}\n", r.address_space, r.first.region,
                         rs[r.first.region].name, r.first.page, r.count);
    }
  };
  switch (kind) {
    case HintKind::kAccessTrace:
      out = "access trace\n";
      describe_runs(ParseAccessTrace(text, file_name, rs));
      break;
    case HintKind::kVaHints:
      out = "va hints\n";
      describe_runs(ParseVaHints(text, file_name, rs));
      break;
    case HintKind::kReplayTrace: {
      out = "replay trace\n";
      auto accesses = ParseReplayTrace(text, file_name, rs);
      if (!accesses) {
        out += "error: " + accesses.error().ToString() + "\n";
        break;
      }
      for (const TraceAccess& a : *accesses) {
        out += fmt::format("{} region {} \"{}\" page {}\n", a.write ? "write" : "read", a.page.region,
                           rs[a.page.region].name, a.page.page);
      }
      break;
    }
  }
  return out;
}

}  // namespace halite::vectors
