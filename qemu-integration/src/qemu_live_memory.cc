// A running QEMU's guest memory through /proc/PID/mem (halite/qemu/qemu_live_memory.h).
#include "halite/qemu/qemu_live_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

namespace halite::qemu {

Result<uint64_t> ParseGpa2hva(std::string_view text) {
  const std::string_view marker = " is 0x";
  const size_t at = text.rfind(marker);
  if (text.find("Host virtual address for") == std::string_view::npos || at == std::string_view::npos) {
    return Status::Corrupt(fmt::format("gpa2hva: expected \"Host virtual address for ... is 0x...\", got \"{}\"",
                                       text.substr(0, 200)));
  }
  const std::string digits(text.substr(at + marker.size()));
  char* end = nullptr;
  errno = 0;
  const unsigned long long hva = std::strtoull(digits.c_str(), &end, 16);
  if (errno != 0 || end == digits.c_str() || (*end != '\0' && *end != '\n' && *end != '\r')) {
    return Status::Corrupt(fmt::format("gpa2hva: bad address in \"{}\"", text.substr(0, 200)));
  }
  return uint64_t{hva};
}

Result<QemuLiveMemory> QemuLiveMemory::Open(QmpClient& qmp, pid_t pid, const std::vector<GuestRamRange>& ranges) {
  const std::string path = fmt::format("/proc/{}/mem", pid);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return Status::IoError(path + ": cannot open QEMU's memory for reading and writing", errno);
  std::vector<Range> mapped;
  for (const GuestRamRange& r : ranges) {
    if (r.size == 0 || r.gpa % 4096 || r.size % 4096) continue;
    HLT_ASSIGN_OR_RETURN(std::string text, qmp.HumanMonitorCommand(fmt::format("gpa2hva {:#x}", r.gpa)));
    HLT_ASSIGN_OR_RETURN(uint64_t hva, ParseGpa2hva(text));
    mapped.push_back(Range{r.gpa, r.size, hva});
  }
  std::sort(mapped.begin(), mapped.end(), [](const Range& a, const Range& b) { return a.gpa < b.gpa; });
  return QemuLiveMemory(std::move(fd), path, std::move(mapped));
}

const QemuLiveMemory::Range* QemuLiveMemory::Find(uint64_t gpa) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), gpa,
                             [](uint64_t v, const Range& r) { return v < r.gpa; });
  if (it == ranges_.begin()) return nullptr;
  --it;
  return gpa - it->gpa < it->size ? &*it : nullptr;
}

uint64_t QemuLiveMemory::max_pfn() const {
  uint64_t m = 0;
  for (const Range& r : ranges_) m = std::max(m, (r.gpa + r.size) / 4096 - 1);
  return m;
}

Result<bool> QemuLiveMemory::ReadPage(uint64_t pfn, std::span<uint8_t, 4096> out) const {
  const uint64_t gpa = pfn * 4096;
  const Range* r = Find(gpa);
  if (r == nullptr) return false;
  const uint64_t hva = r->hva + (gpa - r->gpa);
  const ssize_t n = ::pread(fd_.get(), out.data(), out.size(), off_t(hva));
  if (n != ssize_t(out.size())) {
    return Status::IoError(fmt::format("{}: reading guest page {:#x} at {:#x}", path_, pfn, hva), n < 0 ? errno : EIO);
  }
  return true;
}

Status QemuLiveMemory::WritePage(uint64_t pfn, std::span<const uint8_t, 4096> in) const {
  const uint64_t gpa = pfn * 4096;
  const Range* r = Find(gpa);
  if (r == nullptr) return Status::NotFound(fmt::format("{}: guest page {:#x} is in no RAM range", path_, pfn));
  const uint64_t hva = r->hva + (gpa - r->gpa);
  const ssize_t n = ::pwrite(fd_.get(), in.data(), in.size(), off_t(hva));
  if (n != ssize_t(in.size())) {
    return Status::IoError(fmt::format("{}: writing guest page {:#x} at {:#x}", path_, pfn, hva), n < 0 ? errno : EIO);
  }
  return Status::Ok();
}

}  // namespace halite::qemu
