#include "page_cache_pin.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace halite::image_server {

PageCachePin::~PageCachePin() { Unmap(); }

void PageCachePin::Unmap() {
  if (map_ != nullptr) munmap(map_, size_);
  map_ = nullptr;
}

bool PageCachePin::Map(const std::string& path, uint64_t size, std::string* error) {
  if (size == 0) return true;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": cannot open to pin its pages: " + std::strerror(errno);
    return false;
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);  // the mapping holds the file
  if (m == MAP_FAILED) {
    *error = path + ": cannot map to pin its pages: " + std::strerror(map_errno);
    return false;
  }
  // Locking a page that left the cache reads it back; without readahead, or the pin's faults would pull in
  // the blocks around it too and turn the lazy server into an eager one.
  madvise(m, size, MADV_RANDOM);
  map_ = m;
  size_ = size;
  return true;
}

void PageCachePin::Pin(uint64_t offset, uint64_t length) {
  if (map_ == nullptr || refused_.load() || offset >= size_) return;
  length = std::min(length, size_ - offset);
  // The system call itself: AddressSanitizer and ThreadSanitizer replace mlock() with a no-op that reports
  // success, and the sanitizer test legs check that pinned pages stay.
  if (syscall(SYS_mlock, static_cast<char*>(map_) + offset, length) == 0) {
    pages_pinned_ += (length + 4095) / 4096;
    return;
  }
  // ENOMEM (over RLIMIT_MEMLOCK) or EPERM: the same answer next time, so stop asking.
  last_errno_ = errno;
  pin_errors_++;
  refused_ = true;
}

}  // namespace halite::image_server
