// A running QEMU's guest memory, read and written in place through /proc/PID/mem.
//
// Where each guest-physical RAM range sits in QEMU's address space comes from HMP `gpa2hva` (QEMU 2.9 and
// later; `info ramblock` does not print host addresses in 7.2). Reading and writing another process's memory
// needs ptrace permission over it (root, or QEMU's own user with ptrace_scope 0). Used for the accessed-bit
// sampling before a save (qemu_access_window.h); the caller keeps the vCPUs stopped while it writes.
// Not thread-safe.
#ifndef HALITE_QEMU_QEMU_LIVE_MEMORY_H_
#define HALITE_QEMU_QEMU_LIVE_MEMORY_H_

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halite/qemu/qemu_stream_input.h"
#include "halite/qemu/qemu_guest_info.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/status.h"

namespace halite::qemu {

// Parses HMP's "Host virtual address for 0x1000 (pc.ram) is 0x7f59f3e01000". Errors: corrupt naming the text.
Result<uint64_t> ParseGpa2hva(std::string_view text);

class QemuLiveMemory {
 public:
  // Opens /proc/PID/mem and asks QEMU where each of `ranges` (QueryGuestRamMap) is mapped. Errors: io-error
  // naming /proc/PID/mem (no such process, no permission), those of the HMP command.
  static Result<QemuLiveMemory> Open(QmpClient& qmp, pid_t pid, const std::vector<GuestRamRange>& ranges);

  // Guest-physical page `pfn`: false when no range holds it. Errors: io-error naming the page.
  Result<bool> ReadPage(uint64_t pfn, std::span<uint8_t, 4096> out) const;
  // Errors: not-found when no range holds `pfn`; io-error naming the page.
  Status WritePage(uint64_t pfn, std::span<const uint8_t, 4096> in) const;
  uint64_t max_pfn() const;

 private:
  struct Range {
    uint64_t gpa = 0, size = 0, hva = 0;
  };
  QemuLiveMemory(UniqueFd fd, std::string path, std::vector<Range> ranges)
      : fd_(std::move(fd)), path_(std::move(path)), ranges_(std::move(ranges)) {}
  const Range* Find(uint64_t gpa) const;

  UniqueFd fd_;
  std::string path_;
  std::vector<Range> ranges_;  // ascending gpa
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_LIVE_MEMORY_H_
