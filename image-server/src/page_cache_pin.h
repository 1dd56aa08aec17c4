// Keeps a served file's page-cache pages resident while the server runs.
//
// The pages the server stores ahead of the guests (a decoded block's other pages) are not mapped by any clone
// until one touches them, so to the kernel they look cold: proactive reclaim (DAMON's "pageout" schemes, which
// this project's CI machine runs) or memory pressure drops them, and the next clone's touch decodes the block
// again. Mapping the file read-only in the server and mlock()ing each stored range makes the pages unevictable
// for as long as the server lives; they are the "one image" of the host's memory budget either way.
//
// mlock needs CAP_IPC_LOCK or room under RLIMIT_MEMLOCK: when refused, pinning stops for the file (counted in
// pin_errors) and the pages stay ordinary page cache.
#ifndef HALITE_IMAGE_SERVER_PAGE_CACHE_PIN_H_
#define HALITE_IMAGE_SERVER_PAGE_CACHE_PIN_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace halite::image_server {

class PageCachePin {
 public:
  PageCachePin() = default;
  ~PageCachePin();
  PageCachePin(const PageCachePin&) = delete;
  PageCachePin& operator=(const PageCachePin&) = delete;

  // Maps `path` (a file of the server's own mount, `size` bytes). False, with errno's text in *error, when the
  // open or the mapping fails; the pin then does nothing.
  bool Map(const std::string& path, uint64_t size, std::string* error);

  // Locks [offset, offset + length) of the file in memory (page aligned). A page that left the page cache since
  // it was stored is read through the mount again: call this from a thread the FUSE session does not wait for.
  void Pin(uint64_t offset, uint64_t length);

  // Unlocks and unmaps (the server does before it unmounts); the counters stay.
  void Unmap();

  uint64_t pages_pinned() const { return pages_pinned_.load(); }
  uint64_t pin_errors() const { return pin_errors_.load(); }
  int last_errno() const { return last_errno_.load(); }

 private:
  void* map_ = nullptr;
  uint64_t size_ = 0;
  std::atomic<bool> refused_{false};
  std::atomic<uint64_t> pages_pinned_{0}, pin_errors_{0};
  std::atomic<int> last_errno_{0};
};

}  // namespace halite::image_server

#endif  // HALITE_IMAGE_SERVER_PAGE_CACHE_PIN_H_
