// Guest memory of a running QEMU through /proc/PID/mem (halite/qemu/qemu_live_memory.h): HMP's gpa2hva parsed,
// pages read and written in place, here in this process's own memory.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "halite/qemu/qemu_live_memory.h"

namespace halite::qemu {
namespace {

// Answers human-monitor-command "gpa2hva GPA" with one host address for one guest-physical address.
class Gpa2hvaOnly final : public QmpClient {
 public:
  Gpa2hvaOnly(uint64_t gpa, uint64_t hva) : QmpClient("fake"), gpa_(gpa), hva_(hva) {}
  Result<Json> ExecuteWithFd(std::string_view command, const Json& arguments, int, int) override {
    if (command != "human-monitor-command") return Status::Unsupported("fake: only human-monitor-command");
    const Json* line = FindMember(arguments, "command-line");
    if (line == nullptr || AsString(*line) != fmt::format("gpa2hva {:#x}", gpa_)) {
      return Json(std::string("Unknown command\r\n"));
    }
    return Json(fmt::format("Host virtual address for {:#x} (pc.ram) is {:#x}\r\n", gpa_, hva_));
  }

 protected:
  Status ReadEvents(int, const char*) override { return Status::Ok(); }

 private:
  uint64_t gpa_, hva_;
};

}  // namespace

TEST_CASE("gpa2hva's answer is parsed; anything else is refused", "[live_memory]") {
  auto hva = ParseGpa2hva("Host virtual address for 0x1000 (pc.ram) is 0x7f59f3e01000\r\n");
  REQUIRE(hva);
  CHECK(*hva == 0x7f59f3e01000ull);
  CHECK_FALSE(ParseGpa2hva("Unknown command: 'gpa2hva'"));
  CHECK_FALSE(ParseGpa2hva("Host virtual address for 0x1000 (pc.ram) is 0xzz"));
  CHECK_FALSE(ParseGpa2hva("Error: Memory at address 0xfffff000 is not RAM"));
}

TEST_CASE("guest pages are read and written in place through /proc/PID/mem", "[live_memory]") {
  constexpr uint64_t kGpa = 0x100000;
  auto* buffer = static_cast<uint8_t*>(std::aligned_alloc(4096, 3 * 4096));
  REQUIRE(buffer != nullptr);
  for (int i = 0; i < 3 * 4096; ++i) buffer[i] = uint8_t(i / 4096 + 1);
  Gpa2hvaOnly qmp(kGpa, reinterpret_cast<uint64_t>(buffer));
  auto mem = QemuLiveMemory::Open(qmp, getpid(), {GuestRamRange{kGpa, 3 * 4096, "pc.ram", 0}});
  REQUIRE(mem);
  CHECK(mem->max_pfn() == kGpa / 4096 + 2);

  std::array<uint8_t, 4096> page{};
  auto read = mem->ReadPage(kGpa / 4096 + 2, page);
  REQUIRE(read);
  CHECK(*read);
  CHECK(page[0] == 3);
  CHECK(page[4095] == 3);
  auto outside = mem->ReadPage(kGpa / 4096 + 3, page);
  REQUIRE(outside);
  CHECK_FALSE(*outside);

  page.fill(0xab);
  REQUIRE(mem->WritePage(kGpa / 4096 + 1, page).ok());
  CHECK(buffer[4096] == 0xab);
  CHECK(buffer[2 * 4096 - 1] == 0xab);
  CHECK(buffer[0] == 1);
  CHECK(buffer[2 * 4096] == 3);
  CHECK(mem->WritePage(0, page).code() == StatusCode::kNotFound);
  std::free(buffer);

  // QEMU's memory cannot be opened: the error names /proc/PID/mem.
  auto none = QemuLiveMemory::Open(qmp, 0x7ffffff0, {});
  REQUIRE_FALSE(none);
  CHECK(none.error().message().find("/proc/2147483632/mem") != std::string::npos);
}

}  // namespace halite::qemu
