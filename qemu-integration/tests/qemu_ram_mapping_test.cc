// halite/qemu/qemu_ram_mapping.h: /proc/PID/maps parsing, and the page map of a private file mapping of this
// process telling written pages from the file's own (what an incremental save of a --memory shared clone uses).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "halite/qemu/qemu_ram_mapping.h"

namespace halite::qemu {
namespace {

TEST_CASE("maps lines parse, and QEMU's private file mapping of a RAMBlock is found by size", "[ram_mapping]") {
  const std::string text =
      "55d0c0000000-55d0c0100000 r--p 00000000 fd:01 1234 /usr/bin/qemu-system-x86_64\n"
      "7f0000000000-7f0040000000 rw-p 00000000 00:2a 7 /run/halite/images/ab/ckpt.pc.ram\n"
      "7f0040000000-7f0040001000 ---p 00000000 00:00 0 \n"
      "7f0050000000-7f0050020000 rw-p 00000000 00:00 0\n"
      "7f0060000000-7f0060020000 rw-s 00000000 00:05 9 /memfd:x (deleted)\n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
  auto m = ParseProcessMappings(text, "maps");
  REQUIRE(m);
  REQUIRE(m->size() == 6);
  CHECK((*m)[1].path == "/run/halite/images/ab/ckpt.pc.ram");
  CHECK((*m)[1].private_writable_file());
  CHECK((*m)[2].path.empty());
  CHECK_FALSE((*m)[3].private_writable_file());  // anonymous
  CHECK_FALSE((*m)[4].private_writable_file());  // shared
  CHECK_FALSE((*m)[5].private_writable_file());  // [stack] is no file
  auto ram = FindPrivateFileMapping(*m, uint64_t(1) << 30);
  REQUIRE(ram);
  CHECK(ram->start == 0x7f0000000000ull);
  CHECK_FALSE(FindPrivateFileMapping(*m, 4096));

  auto bad = ParseProcessMappings("7f00-7e00 rw-p 0 00:00 0\n", "maps");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("maps: line 1") != std::string::npos);
}

TEST_CASE("page map entries: the file's page and a never-touched page are unwritten, an anonymous copy is not",
          "[ram_mapping]") {
  CHECK(PagemapEntryIsUnwrittenFilePage(0));                                      // never faulted in
  CHECK(PagemapEntryIsUnwrittenFilePage((uint64_t(1) << 63) | (uint64_t(1) << 61) | 42));  // the file's page
  CHECK_FALSE(PagemapEntryIsUnwrittenFilePage((uint64_t(1) << 63) | 42));          // anonymous (written)
  CHECK_FALSE(PagemapEntryIsUnwrittenFilePage(uint64_t(1) << 62));                 // swapped anonymous
}

TEST_CASE("the page map of a private file mapping of this process shows exactly the pages written",
          "[ram_mapping]") {
  constexpr size_t kPages = 32;
  char path[] = "/tmp/halite-ram-mapping-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  unlink(path);
  std::vector<uint8_t> content(kPages * 4096);
  for (size_t i = 0; i < content.size(); ++i) content[i] = uint8_t(i * 7 + i / 4096);
  REQUIRE(pwrite(fd, content.data(), content.size(), 0) == ssize_t(content.size()));
  auto* base = static_cast<uint8_t*>(mmap(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
  REQUIRE(base != MAP_FAILED);
  volatile uint8_t sink = 0;
  for (size_t p = 0; p < 8; ++p) sink = sink + base[p * 4096];  // read: the file's pages, mapped
  for (size_t p : {3, 9, 20}) base[p * 4096 + 5] ^= 1;           // written: private anonymous copies
  auto unwritten = UnwrittenPagesOfPrivateFileMapping(getpid(), reinterpret_cast<uint64_t>(base), kPages);
  REQUIRE(unwritten);
  REQUIRE(unwritten->size() == kPages);
  for (size_t p = 0; p < kPages; ++p) {
    INFO("page " << p);
    CHECK((*unwritten)[p] == (p != 3 && p != 9 && p != 20));
  }
  munmap(base, content.size());
  close(fd);
}

}  // namespace
}  // namespace halite::qemu
