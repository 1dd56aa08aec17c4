// halite/qemu/qemu_thp_regather.h: khugepaged's rule, and a child process whose huge pages were split (as a
// background snapshot's write protection splits QEMU's) getting them back, its memory unchanged, while its
// never-written memory stays unbacked.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "halite/qemu/qemu_ram_mapping.h"
#include "halite/qemu/qemu_thp_regather.h"

namespace halite::qemu {
namespace {

TEST_CASE("khugepaged's rule: a range needs 512 - max_ptes_none pages of its own, at least one", "[thp]") {
  CHECK(MinOwnPagesToCollapse(511) == 1);  // the kernel's default
  CHECK(MinOwnPagesToCollapse(0) == 512);
  CHECK(MinOwnPagesToCollapse(256) == 256);
  CHECK(MinOwnPagesToCollapse(600) == 1);  // out of range: as the default
}

TEST_CASE("own pages: present and exclusively mapped; the zero page and shared pages are not", "[thp]") {
  const uint64_t present = uint64_t(1) << 63, exclusive = uint64_t(1) << 56;
  CHECK(PagemapEntryIsOwnPage(present | exclusive | 42));
  CHECK_FALSE(PagemapEntryIsOwnPage(present | 42));  // the zero page, KSM, a fork's
  CHECK_FALSE(PagemapEntryIsOwnPage(0));
  CHECK_FALSE(PagemapEntryIsOwnPage(exclusive));
}

TEST_CASE("the report says why nothing ran, and what ran", "[thp]") {
  ThpRegatherReport r;
  r.skipped = "transparent huge pages are never";
  CHECK(ThpRegatherReportText(r).find("not gathered before the pause: transparent huge pages are never") !=
        std::string::npos);
  ThpRegatherReport ran;
  ran.ranges = 1024, ran.candidates = 600, ran.collapsed = 598, ran.failed = 2, ran.first_failure = "busy";
  const std::string text = ThpRegatherReportText(ran);
  CHECK(text.find("600 of 1024 2 MiB ranges") != std::string::npos);
  CHECK(text.find("598 gathered") != std::string::npos);
  CHECK(text.find("2 left as they were (busy)") != std::string::npos);
}

// AnonHugePages (kB) of the mapping that holds `address` in process `pid`.
long AnonHugeKb(pid_t pid, uint64_t address) {
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  bool in = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      in = lo <= address && address < hi;
      continue;
    }
    if (in && line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14));
  }
  return -1;
}

std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  return line;
}

TEST_CASE("a child's split huge pages are gathered again, its content unchanged, its unwritten memory unbacked",
          "[thp]") {
  if (ThpMode().find("[never]") != std::string::npos || ThpMode().empty()) {
    WARN("SKIPPED: transparent huge pages are off here (" << ThpMode() << ")");
    return;
  }
  constexpr uint64_t kWritten = 8ull << 20, kUnwritten = 8ull << 20, kTotal = kWritten + kUnwritten;
  // One mapping, 2 MiB aligned: the first 8 MiB written (huge pages, then split), the rest only read.
  void* raw = mmap(nullptr, kTotal + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(raw != MAP_FAILED);
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kHugePageBytes - 1) /
                                          kHugePageBytes * kHugePageBytes);
  int ready[2], go[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(go) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child owns its copy-on-write copy: the parent never touched `base`, so nothing is shared.
    (void)madvise(base, kTotal, MADV_HUGEPAGE);
    for (uint64_t i = 0; i < kWritten; i += 4096) base[i] = uint8_t(i / 4096 * 7 + 1);
    volatile uint8_t sum = 0;
    for (uint64_t i = kWritten; i < kTotal; i += 4096) sum = sum + base[i];  // maps the zero page
    // Split each written huge page by changing one 4 KiB page's protection and back, as QEMU's page-by-page
    // lifting of its write protection does.
    for (uint64_t h = 0; h < kWritten; h += kHugePageBytes) {
      (void)mprotect(base + h, 4096, PROT_READ);
      (void)mprotect(base + h, 4096, PROT_READ | PROT_WRITE);
    }
    char c = 1;
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(3);
    for (uint64_t i = 0; i < kWritten; i += 4096) {
      if (base[i] != uint8_t(i / 4096 * 7 + 1)) _exit(1);
    }
    for (uint64_t i = kWritten; i < kTotal; i += 4096) {
      if (base[i] != 0) _exit(2);
    }
    _exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  const long huge_before = AnonHugeKb(child, reinterpret_cast<uint64_t>(base));
  const ThpRegatherReport report =
      RegatherHugePages(child, {{"test", reinterpret_cast<uint64_t>(base), kTotal}});
  const long huge_after = AnonHugeKb(child, reinterpret_cast<uint64_t>(base));
  REQUIRE(write(go[1], &c, 1) == 1);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  munmap(raw, kTotal + kHugePageBytes);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
  INFO("report: " << ThpRegatherReportText(report) << " AnonHugePages " << huge_before << " -> " << huge_after);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // content unchanged
  if (!report.skipped.empty()) {
    WARN("SKIPPED: gathering huge pages is not possible here: " << report.skipped);
    return;
  }
  CHECK(report.ranges == kTotal / kHugePageBytes);
  CHECK(report.candidates == kWritten / kHugePageBytes);  // the read-only half is not a candidate
  CHECK(report.collapsed + report.failed == report.candidates);
  CHECK(huge_before < long(kWritten / 1024));
  // Each collapsed range is one more huge page; the unwritten half never gains one.
  CHECK(huge_after >= huge_before + long(report.collapsed * kHugePageBytes / 1024) - long(kHugePageBytes / 1024));
  CHECK(huge_after <= long(kWritten / 1024));
  CHECK(report.collapsed >= 1);
}

}  // namespace
}  // namespace halite::qemu
