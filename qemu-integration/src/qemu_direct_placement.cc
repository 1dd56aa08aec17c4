// halite/qemu/qemu_direct_placement.h: QEMU's userfaultfd duplicated into this process, guest RAM's host
// addresses, and the sink that places pages through them.
#include "halite/qemu/qemu_direct_placement.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "halite/userfaultfd_ops.h"

namespace halite::qemu {
namespace {

constexpr uint64_t kPage = kTargetPageSize;

Status NoPermission(pid_t pid, const std::string& what, int e) {
  return Status(StatusCode::kUnsupported,
                fmt::format("{} of QEMU (pid {}): {} (placing pages directly needs ptrace permission over QEMU: "
                            "the same user, and kernel.yama.ptrace_scope allowing it)",
                            what, pid, std::strerror(e)),
                e);
}

Result<UniqueFd> OpenPidfd(pid_t pid) {
  // The system calls directly: glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++.
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) {
    const int e = errno;
    if (e == ENOSYS) return Status(StatusCode::kUnsupported, "pidfd_open: the kernel is older than 5.3", e);
    return Status::IoError(fmt::format("pidfd_open of QEMU (pid {})", pid), e);
  }
  return pidfd;
}

// The descriptors of `pid` whose /proc link reads `kind` (all of them when kind is empty).
Result<std::vector<int>> ListFds(pid_t pid, const char* kind) {
  const std::string dir = fmt::format("/proc/{}/fd", pid);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    const int e = errno;
    if (e == EACCES || e == EPERM) return NoPermission(pid, "listing the descriptors (" + dir + ")", e);
    return Status::IoError(dir + ": cannot list QEMU's descriptors", e);
  }
  std::vector<int> found;
  while (dirent* ent = readdir(d)) {
    if (ent->d_name[0] == '.') continue;
    char target[128] = {0};
    const std::string link = dir + "/" + ent->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n > 0 && (kind[0] == 0 || std::strcmp(target, kind) == 0)) found.push_back(std::atoi(ent->d_name));
  }
  closedir(d);
  return found;
}

Result<UniqueFd> GetFd(int pidfd, pid_t pid, int target) {
  UniqueFd fd(static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, target, 0)));
  if (!fd.valid()) {
    const int e = errno;
    if (e == EPERM || e == EACCES) return NoPermission(pid, fmt::format("pidfd_getfd of descriptor {}", target), e);
    if (e == ENOSYS) return Status(StatusCode::kUnsupported, "pidfd_getfd: the kernel is older than 5.6", e);
    return Status::IoError(fmt::format("pidfd_getfd of QEMU's (pid {}) descriptor {}", pid, target), e);
  }
  return fd;
}

}  // namespace

Status CheckCanDuplicateFds(pid_t pid) {
  HLT_ASSIGN_OR_RETURN(UniqueFd pidfd, OpenPidfd(pid));
  HLT_ASSIGN_OR_RETURN(std::vector<int> fds, ListFds(pid, ""));
  if (fds.empty()) return Status::NotFound(fmt::format("QEMU (pid {}) has no descriptor open", pid));
  return GetFd(pidfd.get(), pid, fds.front()).status();
}

Result<UniqueFd> DuplicateUserfaultfd(pid_t pid) {
  HLT_ASSIGN_OR_RETURN(UniqueFd pidfd, OpenPidfd(pid));
  HLT_ASSIGN_OR_RETURN(std::vector<int> found, ListFds(pid, "anon_inode:[userfaultfd]"));
  if (found.empty()) {
    return Status::NotFound(fmt::format("QEMU (pid {}) has no userfaultfd open (not in postcopy?)", pid));
  }
  if (found.size() > 1) {
    return Status::NotFound(
        fmt::format("QEMU (pid {}) has {} userfaultfds open: cannot tell which one serves guest RAM", pid,
                    found.size()));
  }
  return GetFd(pidfd.get(), pid, found[0]);
}

Result<uint64_t> RamBlockHostAddress(QmpClient& qmp, pid_t pid, const std::string& block, uint64_t gpa,
                                     uint64_t size) {
  HLT_ASSIGN_OR_RETURN(std::string answer, qmp.HumanMonitorCommand(fmt::format("gpa2hva {:#x}", gpa)));
  // "Host virtual address for 0x0 (pc.ram) is 0x7f8403e00000"
  const std::string named = " (" + block + ") is 0x";
  const size_t at = answer.find(named);
  if (answer.rfind("Host virtual address for ", 0) != 0 || at == std::string::npos) {
    while (!answer.empty() && (answer.back() == '\n' || answer.back() == '\r')) answer.pop_back();
    return Status::NotFound(fmt::format("{}: guest-physical {:#x} is not RAMBlock {}'s offset 0 (gpa2hva: {})",
                                        qmp.name(), gpa, block, answer));
  }
  const uint64_t address = std::strtoull(answer.c_str() + at + named.size(), nullptr, 16);
  if (address == 0 || address % kPage != 0) {
    return Status::Corrupt(fmt::format("{}: gpa2hva {:#x}: unexpected answer {}", qmp.name(), gpa, answer));
  }
  if (pid <= 0) return address;
  // The block must be one private writable mapping of QEMU's (an anonymous RAM allocation), not a file or ROM.
  const std::string maps_path = fmt::format("/proc/{}/maps", pid);
  std::ifstream maps(maps_path);
  if (!maps) return Status::IoError(maps_path + ": cannot read QEMU's mappings", errno);
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t lo = 0, hi = 0, file_offset = 0, inode = 0;
    char perms[8] = {0}, dev[16] = {0};
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %15s %" SCNu64, &lo, &hi, perms,
                    &file_offset, dev, &inode) != 6) {
      continue;
    }
    if (address < lo || address >= hi) continue;
    if (address + size > hi || std::strncmp(perms, "rw-p", 4) != 0 || inode != 0) {
      return Status::NotFound(fmt::format("{}: RAMBlock {} at {:#x} (+{:#x}) is not inside one private anonymous "
                                          "writable mapping ({})",
                                          maps_path, block, address, size, line));
    }
    return address;
  }
  return Status::NotFound(fmt::format("{}: no mapping holds RAMBlock {} at {:#x}", maps_path, block, address));
}

DirectUffdSink::DirectUffdSink(int uffd, std::vector<DirectRegion> regions)
    : uffd_(uffd), regions_(std::move(regions)) {
  for (const DirectRegion& r : regions_) {
    const uint64_t words = r.host_address != 0 ? (r.pages + 63) / 64 : 0;
    placed_.emplace_back(new std::atomic<uint64_t>[words]);
    for (uint64_t i = 0; i < words; ++i) placed_.back()[i].store(0, std::memory_order_relaxed);
  }
}

bool DirectUffdSink::IsPlaced(PageRef page) const {
  if (!IsDirect(page.region) || page.page >= regions_[page.region].pages) return false;
  return (placed_[page.region][page.page / 64].load(std::memory_order_acquire) >> (page.page % 64)) & 1;
}

Status DirectUffdSink::PlaceRun(const PageInstall& run, uint64_t dst) {
  const uint64_t len = run.count * kPage;
  const bool zero = run.zero();
  uint64_t off = 0;
  int idle_retries = 0;
  while (off < len) {
    const uffd::Fill f = zero ? uffd::ZeroPage(uffd_, dst + off, len - off, /*wake=*/false)
                              : uffd::Copy(uffd_, dst + off, run.data.data() + off, len - off, /*wake=*/false);
    (zero ? zero_ioctls_ : copy_ioctls_).fetch_add(1, std::memory_order_relaxed);
    const uint64_t done = f.done / kPage * kPage;
    (zero ? pages_zeroed_ : pages_copied_).fetch_add(done / kPage, std::memory_order_relaxed);
    off += done;
    if (f.err == 0) break;
    if (f.err == EEXIST) {
      // The page at `off` is populated already: leave it, go on with the next one.
      pages_existed_.fetch_add(1, std::memory_order_relaxed);
      off += kPage;
      continue;
    }
    if (f.err == EAGAIN) {
      if (done > 0) {
        partial_fills_.fetch_add(1, std::memory_order_relaxed);
        idle_retries = 0;
        continue;
      }
      // QEMU's address space is changing (mremap, fork): try again shortly, for at most about a second.
      retries_.fetch_add(1, std::memory_order_relaxed);
      if (++idle_retries > 1000) {
        return Status::IoError(fmt::format("userfaultfd: QEMU's memory at {:#x} stayed busy (EAGAIN)", dst + off),
                               EAGAIN);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (f.err == ESRCH || f.err == ENOSPC) {
      return Status::IoError("QEMU's memory is gone (did QEMU exit?): placing a page through its userfaultfd failed",
                             f.err);
    }
    return Status::IoError(fmt::format("{} at {:#x} (+{} pages) through QEMU's userfaultfd: {}",
                                       zero ? "UFFDIO_ZEROPAGE" : "UFFDIO_COPY", dst + off, (len - off) / kPage,
                                       std::strerror(f.err)),
                           f.err);
  }
  return Status::Ok();
}

Status DirectUffdSink::Install(std::span<const PageInstall> batch, InstallPriority, size_t* runs_installed) {
  *runs_installed = 0;
  Status s;
  for (const PageInstall& run : batch) {
    const PageRef first = run.first;
    if (!IsDirect(first.region) || run.count == 0 || run.count > regions_[first.region].pages ||
        first.page > regions_[first.region].pages - run.count ||
        (!run.zero() && run.data.size() != run.count * kPage)) {
      s = Status::InvalidArgument(fmt::format("direct placement: run of region {} pages {}+{} is not placeable",
                                              first.region, first.page, run.count));
      break;
    }
    // Never a page twice: the engine promises it, and a second copy would be EEXIST-silent here.
    for (uint64_t p = first.page; p < first.page + run.count; ++p) {
      if (IsPlaced(PageRef{first.region, p})) {
        s = Status::Internal(fmt::format("direct placement: page {} of region {} placed twice", p, first.region));
        break;
      }
    }
    if (!s.ok()) break;
    const uint64_t dst = regions_[first.region].host_address + first.page * kPage;
    s = PlaceRun(run, dst);
    if (!s.ok()) break;
    std::atomic<uint64_t>* bits = placed_[first.region].get();
    for (uint64_t p = first.page; p < first.page + run.count; ++p) {
      bits[p / 64].fetch_or(uint64_t{1} << (p % 64), std::memory_order_acq_rel);
    }
    ++*runs_installed;
  }
  // Wake once per batch, when every page of it is in: a vCPU waiting on one page of the block resumes when the
  // whole block is there, instead of faulting again on its next page meanwhile. Adjacent runs share a wake.
  for (size_t i = 0; i < *runs_installed;) {
    const PageRef first = batch[i].first;
    uint64_t end = first.page + batch[i].count;
    size_t j = i + 1;
    while (j < *runs_installed && batch[j].first.region == first.region && batch[j].first.page == end) {
      end += batch[j].count;
      ++j;
    }
    const uint64_t dst = regions_[first.region].host_address + first.page * kPage;
    const int e = uffd::Wake(uffd_, dst, (end - first.page) * kPage);
    wakes_.fetch_add(1, std::memory_order_relaxed);
    if (e != 0 && s.ok()) {
      s = Status::IoError(fmt::format("UFFDIO_WAKE at {:#x} through QEMU's userfaultfd: {}", dst, std::strerror(e)),
                          e);
    }
    i = j;
  }
  return s;
}

DirectPlacementStats DirectUffdSink::stats() const {
  DirectPlacementStats out;
  out.pages_copied = pages_copied_.load(std::memory_order_relaxed);
  out.pages_zeroed = pages_zeroed_.load(std::memory_order_relaxed);
  out.pages_existed = pages_existed_.load(std::memory_order_relaxed);
  out.copy_ioctls = copy_ioctls_.load(std::memory_order_relaxed);
  out.zero_ioctls = zero_ioctls_.load(std::memory_order_relaxed);
  out.partial_fills = partial_fills_.load(std::memory_order_relaxed);
  out.retries = retries_.load(std::memory_order_relaxed);
  out.wakes = wakes_.load(std::memory_order_relaxed);
  return out;
}

ProcessMemorySink::ProcessMemorySink(pid_t pid, std::vector<DirectRegion> regions)
    : pid_(pid), regions_(std::move(regions)) {}

Status ProcessMemorySink::Install(std::span<const PageInstall> batch, InstallPriority, size_t* runs_installed) {
  *runs_installed = 0;
  for (const PageInstall& run : batch) {
    const PageRef first = run.first;
    if (!IsDirect(first.region) || run.count == 0 || run.count > regions_[first.region].pages ||
        first.page > regions_[first.region].pages - run.count ||
        (!run.zero() && run.data.size() != run.count * kPage)) {
      return Status::InvalidArgument(fmt::format("direct placement: run of region {} pages {}+{} is not placeable",
                                                 first.region, first.page, run.count));
    }
    if (run.zero()) {
      zero_skipped_.fetch_add(run.count, std::memory_order_relaxed);
      ++*runs_installed;
      continue;
    }
    const uint64_t dst = regions_[first.region].host_address + first.page * kPage;
    uint64_t off = 0;
    while (off < run.data.size()) {
      iovec local{const_cast<uint8_t*>(run.data.data() + off), run.data.size() - off};
      iovec remote{reinterpret_cast<void*>(dst + off), run.data.size() - off};
      const ssize_t n = process_vm_writev(pid_, &local, 1, &remote, 1, 0);
      calls_.fetch_add(1, std::memory_order_relaxed);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        if (e == ESRCH) return Status::IoError("QEMU's memory is gone (did QEMU exit?): process_vm_writev failed", e);
        return Status::IoError(fmt::format("process_vm_writev of {} bytes at {:#x} into QEMU (pid {}): {}",
                                           run.data.size() - off, dst + off, pid_, std::strerror(e)),
                               e);
      }
      off += uint64_t(n);
    }
    pages_copied_.fetch_add(run.count, std::memory_order_relaxed);
    ++*runs_installed;
  }
  return Status::Ok();
}

DirectPlacementStats ProcessMemorySink::stats() const {
  DirectPlacementStats out;
  out.pages_copied = pages_copied_.load(std::memory_order_relaxed);
  out.zero_pages_skipped = zero_skipped_.load(std::memory_order_relaxed);
  out.write_calls = calls_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace halite::qemu
