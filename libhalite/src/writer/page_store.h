// Where a writer keeps page content until Finish(): staged pages in an unlinked temporary file, attached
// images read in place. Also classifies pages (zero or not) and hashes them for deduplication. A writer of an
// encrypted checkpoint stages pages encrypted (EncryptStaging): no plaintext page reaches the staging file.
#ifndef HALITE_WRITER_PAGE_STORE_H_
#define HALITE_WRITER_PAGE_STORE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/aead.h"
#include "codec/hashing.h"
#include "halite/status.h"

namespace halite {
class WorkerPool;
}

namespace halite::writer {

enum class PageState : uint8_t { kAbsent = 0, kZero = 1, kStaged = 2, kImage = 3 };

class PageStore {
 public:
  PageStore() = default;
  ~PageStore();
  PageStore(const PageStore&) = delete;
  PageStore& operator=(const PageStore&) = delete;

  // From now on, staged pages are sealed with `algorithm` under a random key that lives only in this object's
  // memory (each write with a fresh nonce: a page given again is sealed anew). Call before the first Put().
  Status EncryptStaging(codec::AeadAlgorithm algorithm);
  bool staging_encrypted() const { return staging_key_ != nullptr; }
  // Tests: the staging file's descriptor (-1 before the first staged page).
  int staging_fd_for_testing() const { return staging_fd_; }

  // Grows the store to `total_pages` (called as regions are added).
  void Resize(uint64_t total_pages);
  uint64_t total_pages() const { return state_.size(); }

  // Copies one page in (classifying it). Staging goes to a temporary file in `staging_dir`.
  Status Put(uint64_t page, std::span<const uint8_t> data, const std::string& staging_dir);
  void PutZero(uint64_t page) { state_[page] = PageState::kZero; }
  // Makes a page absent again (a balloon took back a page sent earlier).
  void Forget(uint64_t page) { state_[page] = PageState::kAbsent; }
  // Pages [first, first+count) are backed by `path` from offset 0; reads and classifies them now, on `pool`'s
  // workers when one is given.
  Status Attach(uint64_t first, uint64_t count, const std::string& path, WorkerPool* pool = nullptr);
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
  // Reads pages [from, to) of image `im` (number `index`) and sets their state, location and hash.
  Status ClassifyImageRange(const Image& im, uint32_t index, uint64_t from, uint64_t to);
  // A staging slot: the page, then (encrypted staging) its tag and the u64 write counter its nonce came from.
  size_t SlotBytes() const;
  // Writes the page as slot `slot` stores it into out[SlotBytes()].
  void EncodeSlot(uint64_t slot, std::span<const uint8_t> page, uint8_t* out);
  Status DecodeSlot(uint64_t slot, std::span<const uint8_t> stored, uint8_t* out) const;

  std::vector<PageState> state_;
  std::vector<uint64_t> location_;  // staging slot, or image index (kImage)
  std::vector<codec::Hash128> hash_;
  std::vector<Image> images_;
  int staging_fd_ = -1;
  uint64_t staged_ = 0;            // pages written to the staging file (incl. buffered)
  uint64_t staging_flushed_ = 0;   // pages already in the file
  std::vector<uint8_t> staging_buffer_;
  std::unique_ptr<codec::AeadKey> staging_key_;  // encrypted staging; never written anywhere
  uint64_t staging_writes_ = 0;                  // the nonce counter: one per slot written
};

}  // namespace halite::writer

#endif  // HALITE_WRITER_PAGE_STORE_H_
