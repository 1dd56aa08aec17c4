// halite/qemu/qemu_direct_placement.h: QEMU's userfaultfd duplicated into this process, guest RAM's host
// addresses, and the sink that places pages through them.
#include "halite/qemu/qemu_direct_placement.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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

namespace {

// The kernel page size of the mapping of `pid` that starts at `lo` (its KernelPageSize in /proc/PID/smaps).
Result<uint64_t> MappingKernelPageSize(pid_t pid, uint64_t lo) {
  const std::string path = fmt::format("/proc/{}/smaps", pid);
  std::ifstream smaps(path);
  if (!smaps) return Status::IoError(path + ": cannot read QEMU's mappings", errno);
  const std::string header = fmt::format("{:x}-", lo);
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    if (line.rfind(header, 0) == 0) {
      in_mapping = true;
    } else if (in_mapping && line.rfind("KernelPageSize:", 0) == 0) {
      return uint64_t(std::strtoull(line.c_str() + 15, nullptr, 10)) * 1024;
    }
  }
  return Status::NotFound(fmt::format("{}: no KernelPageSize for the mapping at {:#x}", path, lo));
}

}  // namespace

Result<uint64_t> RamBlockHostAddress(QmpClient& qmp, pid_t pid, const std::string& block, uint64_t gpa,
                                     uint64_t size, uint64_t host_page_size) {
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
  // 4 KiB pages: one private writable mapping of QEMU's (an anonymous RAM allocation), not a file or ROM. Larger
  // pages: a hugetlbfs mapping of that page size (memory-backend-file on hugetlbfs, or memfd with hugetlb=on).
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
    if (host_page_size == kPage) {
      if (address + size > hi || std::strncmp(perms, "rw-p", 4) != 0 || inode != 0) {
        return Status::NotFound(fmt::format("{}: RAMBlock {} at {:#x} (+{:#x}) is not inside one private anonymous "
                                            "writable mapping ({})",
                                            maps_path, block, address, size, line));
      }
      return address;
    }
    if (address + size > hi || std::strncmp(perms, "rw", 2) != 0 || address % host_page_size != 0) {
      return Status::NotFound(fmt::format("{}: RAMBlock {} at {:#x} (+{:#x}) is not inside one writable mapping "
                                          "aligned to its {} KiB pages ({})",
                                          maps_path, block, address, size, host_page_size >> 10, line));
    }
    HLT_ASSIGN_OR_RETURN(uint64_t kernel_page, MappingKernelPageSize(pid, lo));
    if (kernel_page != host_page_size) {
      return Status::NotFound(fmt::format("{}: RAMBlock {} at {:#x} is mapped with {} KiB pages, not hugetlbfs {} KiB "
                                          "pages ({})",
                                          maps_path, block, address, kernel_page >> 10, host_page_size >> 10, line));
    }
    return address;
  }
  return Status::NotFound(fmt::format("{}: no mapping holds RAMBlock {} at {:#x}", maps_path, block, address));
}

DirectUffdSink::DirectUffdSink(int uffd, std::vector<DirectRegion> regions)
    : uffd_(uffd), regions_(std::move(regions)) {
  uint64_t largest = kPage;
  for (const DirectRegion& r : regions_) largest = std::max(largest, r.host_page_size);
  if (largest > kPage) zeros_.assign(largest, 0);
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

Status DirectUffdSink::Place(uint64_t dst, const uint8_t* src, uint64_t len, uint64_t step) {
  const bool zero = src == nullptr;
  uint64_t off = 0;
  int idle_retries = 0;
  while (off < len) {
    const uffd::Fill f = zero ? uffd::ZeroPage(uffd_, dst + off, len - off, /*wake=*/false)
                              : uffd::Copy(uffd_, dst + off, src + off, len - off, /*wake=*/false);
    (zero ? zero_ioctls_ : copy_ioctls_).fetch_add(1, std::memory_order_relaxed);
    const uint64_t done = f.done / step * step;
    (zero ? pages_zeroed_ : pages_copied_).fetch_add(done / kPage, std::memory_order_relaxed);
    off += done;
    if (f.err == 0) break;
    if (f.err == EEXIST) {
      // The page (the huge page, for hugetlbfs) at `off` is populated already: leave it, go on with the next.
      pages_existed_.fetch_add(step / kPage, std::memory_order_relaxed);
      off += step;
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
    if (f.err == ENOENT && zero && stream_ending_.load(std::memory_order_acquire)) {
      // QEMU has unregistered its memory: it ended postcopy after our end of stream, when every page it needs was
      // in (a request it sent just before reaches us only now). A page never placed now reads as zero.
      zero_pages_after_end_.fetch_add((len - off) / kPage, std::memory_order_relaxed);
      break;
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

Status DirectUffdSink::PlaceHostPage(uint32_t region, uint64_t first, std::span<const PageInstall> runs) {
  const DirectRegion& r = regions_[region];
  const uint64_t bytes = r.host_page_size, unit = bytes / kPage;
  const uint64_t dst = r.host_address + first * kPage;
  // One run covers it: copy from the run itself (zeros for a zero run: hugetlbfs has no UFFDIO_ZEROPAGE).
  for (const PageInstall& run : runs) {
    if (run.first.page <= first && first + unit <= run.first.page + run.count) {
      const uint8_t* src = run.zero() ? zeros_.data() : run.data.data() + (first - run.first.page) * kPage;
      return Place(dst, src, bytes, bytes);
    }
  }
  // Several runs: put their pages together, zero runs as zeros.
  thread_local std::vector<uint8_t> staging;
  staging.resize(bytes);
  for (const PageInstall& run : runs) {
    const uint64_t lo = std::max(first, run.first.page), hi = std::min(first + unit, run.first.page + run.count);
    if (lo >= hi) continue;
    uint8_t* to = staging.data() + (lo - first) * kPage;
    if (run.zero()) {
      std::memset(to, 0, (hi - lo) * kPage);
    } else {
      std::memcpy(to, run.data.data() + (lo - run.first.page) * kPage, (hi - lo) * kPage);
    }
  }
  return Place(dst, staging.data(), bytes, bytes);
}

Status DirectUffdSink::Install(std::span<const PageInstall> batch, InstallPriority, size_t* runs_installed) {
  *runs_installed = 0;
  auto check = [&](const PageInstall& run) -> Status {
    const PageRef first = run.first;
    if (!IsDirect(first.region) || run.count == 0 || run.count > regions_[first.region].pages ||
        first.page > regions_[first.region].pages - run.count ||
        (!run.zero() && run.data.size() != run.count * kPage)) {
      return Status::InvalidArgument(fmt::format("direct placement: run of region {} pages {}+{} is not placeable",
                                                 first.region, first.page, run.count));
    }
    // Never a page twice: the engine promises it, and a second copy would be EEXIST-silent here.
    for (uint64_t p = first.page; p < first.page + run.count; ++p) {
      if (IsPlaced(PageRef{first.region, p})) {
        return Status::Internal(fmt::format("direct placement: page {} of region {} placed twice", p, first.region));
      }
    }
    return Status::Ok();
  };
  auto mark = [&](uint32_t region, uint64_t first, uint64_t end) {
    std::atomic<uint64_t>* bits = placed_[region].get();
    for (uint64_t p = first; p < end; ++p) bits[p / 64].fetch_or(uint64_t{1} << (p % 64), std::memory_order_acq_rel);
  };
  Status s;
  for (size_t i = 0; i < batch.size();) {
    const PageInstall& run = batch[i];
    if (!(s = check(run)).ok()) break;
    const uint32_t region = run.first.region;
    const uint64_t unit = regions_[region].host_page_size / kPage;
    if (unit <= 1) {
      s = Place(regions_[region].host_address + run.first.page * kPage, run.zero() ? nullptr : run.data.data(),
                run.count * kPage, kPage);
      if (!s.ok()) break;
      mark(region, run.first.page, run.first.page + run.count);
      ++*runs_installed;
      ++i;
      continue;
    }
    // Host pages larger than 4 KiB: the runs from here on cover whole ones, one after the other.
    if (run.first.page % unit != 0) {
      s = Status::InvalidArgument(fmt::format("direct placement: run of region {} pages {}+{} begins inside a {} KiB "
                                              "host page",
                                              region, run.first.page, run.count, unit * 4));
      break;
    }
    size_t j = i + 1;
    uint64_t end = run.first.page + run.count;
    while (end % unit != 0 && j < batch.size() && batch[j].first.region == region && batch[j].first.page == end) {
      if (!(s = check(batch[j])).ok()) break;
      end += batch[j].count;
      ++j;
    }
    if (!s.ok()) break;
    if (end % unit != 0) {
      s = Status::InvalidArgument(fmt::format("direct placement: the {} KiB host page at page {} of region {} is not "
                                              "covered by the batch (it stops at page {})",
                                              unit * 4, end / unit * unit, region, end));
      break;
    }
    const std::span<const PageInstall> runs = batch.subspan(i, j - i);
    for (uint64_t hp = run.first.page; hp < end && s.ok(); hp += unit) {
      s = PlaceHostPage(region, hp, runs);
      if (s.ok()) mark(region, hp, hp + unit);
    }
    if (!s.ok()) break;
    *runs_installed += j - i;
    i = j;
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
  out.zero_pages_after_end = zero_pages_after_end_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace halite::qemu
