// Where a writer keeps page content until Finish(): staged pages in an unlinked temporary file, attached
// images read in place. Also classifies pages (zero or not) and hashes them for deduplication.
#ifndef HALITE_WRITER_PAGE_STORE_H_
#define HALITE_WRITER_PAGE_STORE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/hashing.h"
#include "halite/status.h"

namespace halite::writer {

enum class PageState : uint8_t { kAbsent = 0, kZero = 1, kStaged = 2, kImage = 3 };

class PageStore {
 public:
  PageStore() = default;
  ~PageStore();
  PageStore(const PageStore&) = delete;
  PageStore& operator=(const PageStore&) = delete;

  // Grows the store to `total_pages` (called as regions are added).
  void Resize(uint64_t total_pages);
  uint64_t total_pages() const { return state_.size(); }

  // Copies one page in (classifying it). Staging goes to a temporary file in `staging_dir`.
  Status Put(uint64_t page, std::span<const uint8_t> data, const std::string& staging_dir);
  void PutZero(uint64_t page) { state_[page] = PageState::kZero; }
  // Makes a page absent again (a balloon took back a page sent earlier).
  void Forget(uint64_t page) { state_[page] = PageState::kAbsent; }
  // Pages [first, first+count) are backed by `path` from offset 0; reads and classifies them now.
  Status Attach(uint64_t first, uint64_t count, const std::string& path);
  // Makes staged pages readable (flushes the staging buffer). Call before Read().
  Status Seal();

  PageState state(uint64_t page) const { return state_[page]; }
  const codec::Hash128& hash(uint64_t page) const { return hash_[page]; }
  // Reads one stored page (state kStaged or kImage) into out[4096]. Before Seal() from the staging thread only;
  // thread-safe after Seal().
  Status Read(uint64_t page, uint8_t* out) const;

 private:
  struct Image {
    uint64_t first = 0, count = 0;
    int fd = -1;
    std::string path;
  };
  Status OpenStaging(const std::string& dir);
  Status FlushStaging();

  std::vector<PageState> state_;
  std::vector<uint64_t> location_;  // staging slot, or image index (kImage)
  std::vector<codec::Hash128> hash_;
  std::vector<Image> images_;
  int staging_fd_ = -1;
  uint64_t staged_ = 0;            // pages written to the staging file (incl. buffered)
  uint64_t staging_flushed_ = 0;   // pages already in the file
  std::vector<uint8_t> staging_buffer_;
};

}  // namespace halite::writer

#endif  // HALITE_WRITER_PAGE_STORE_H_
