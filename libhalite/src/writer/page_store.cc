#include "writer/page_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "halite/bytes.h"
#include "common/worker_pool.h"
#include "io/posix_io.h"
#include "halite/format_constants.h"

namespace halite::writer {
namespace {
constexpr size_t kPage = format::kPageSize;
constexpr size_t kStagingBufferPages = 256;  // 1 MiB

}  // namespace

PageStore::~PageStore() {
  if (staging_fd_ >= 0) ::close(staging_fd_);
  for (auto& im : images_) ::close(im.fd);
}

void PageStore::Resize(uint64_t total_pages) {
  state_.resize(total_pages, PageState::kAbsent);
  location_.resize(total_pages, 0);
  hash_.resize(total_pages);
}

Status PageStore::OpenStaging(const std::string& dir) {
  staging_fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (staging_fd_ < 0) {
    // No O_TMPFILE: create and unlink at once, so nothing outlives the process.
    std::string tmpl = dir + "/.hlt-staging.XXXXXX";
    staging_fd_ = ::mkstemp(tmpl.data());
    if (staging_fd_ < 0) return Status::IoError(dir + ": cannot create the page staging file", errno);
    ::unlink(tmpl.c_str());
  }
  staging_buffer_.reserve(kStagingBufferPages * SlotBytes());
  return Status::Ok();
}

Status PageStore::EncryptStaging(codec::AeadAlgorithm algorithm) {
  if (staged_ > 0) return Status::Internal("EncryptStaging after pages were staged");
  std::array<uint8_t, codec::kAeadKeySize> key;
  codec::RandomBytes(key);
  auto created = codec::AeadKey::Create(algorithm, key);
  codec::Wipe(key);
  if (!created) return created.error();
  staging_key_ = std::move(*created);
  return Status::Ok();
}

size_t PageStore::SlotBytes() const { return kPage + (staging_key_ ? codec::kAeadTagSize + 8 : 0); }

void PageStore::EncodeSlot(uint64_t slot, std::span<const uint8_t> page, uint8_t* out) {
  if (!staging_key_) {
    std::memcpy(out, page.data(), kPage);
    return;
  }
  // Nonce: a counter bumped at every write, so a slot written again (a page resent) never reuses one; AD: the
  // slot, so a slot's bytes cannot stand in for another's.
  const uint64_t counter = ++staging_writes_;
  codec::AeadNonce nonce{};
  halite::StoreLe64(nonce.data(), counter);
  uint8_t ad[8];
  halite::StoreLe64(ad, slot);
  staging_key_->Seal(nonce, ad, page, std::span(out, kPage + codec::kAeadTagSize));
  halite::StoreLe64(out + kPage + codec::kAeadTagSize, counter);
}

Status PageStore::DecodeSlot(uint64_t slot, std::span<const uint8_t> stored, uint8_t* out) const {
  if (!staging_key_) {
    std::memcpy(out, stored.data(), kPage);
    return Status::Ok();
  }
  codec::AeadNonce nonce{};
  halite::StoreLe64(nonce.data(), halite::LoadLe64(stored.data() + kPage + codec::kAeadTagSize));
  uint8_t ad[8];
  halite::StoreLe64(ad, slot);
  if (!staging_key_->Open(nonce, ad, stored.first(kPage + codec::kAeadTagSize), std::span(out, kPage))) {
    return Status::IoError("page staging file: slot " + std::to_string(slot) +
                           " does not authenticate (changed on disk while the checkpoint was written)");
  }
  return Status::Ok();
}

Status PageStore::FlushStaging() {
  HLT_RETURN_IF_ERROR(io::PwriteFull(staging_fd_, staging_buffer_, staging_flushed_ * SlotBytes(), "page staging file"));
  staging_flushed_ += staging_buffer_.size() / SlotBytes();
  staging_buffer_.clear();
  return Status::Ok();
}

Status PageStore::Put(uint64_t page, std::span<const uint8_t> data, const std::string& staging_dir) {
  if (codec::IsAllZero(data)) {
    state_[page] = PageState::kZero;
    return Status::Ok();
  }
  if (staging_fd_ < 0) HLT_RETURN_IF_ERROR(OpenStaging(staging_dir));
  hash_[page] = codec::Xxh3_128(data);
  const size_t slot_bytes = SlotBytes();
  // A page given again (a live stream resends what the guest dirtied) overwrites its slot, so staging never
  // holds more than one copy of a page.
  if (state_[page] == PageState::kStaged) {
    const uint64_t slot = location_[page];
    if (slot >= staging_flushed_) {
      EncodeSlot(slot, data, staging_buffer_.data() + (slot - staging_flushed_) * slot_bytes);
      return Status::Ok();
    }
    thread_local std::vector<uint8_t> encoded;
    encoded.resize(slot_bytes);
    EncodeSlot(slot, data, encoded.data());
    return io::PwriteFull(staging_fd_, encoded, slot * slot_bytes, "page staging file");
  }
  state_[page] = PageState::kStaged;
  const uint64_t slot = staged_++;
  location_[page] = slot;
  staging_buffer_.resize(staging_buffer_.size() + slot_bytes);
  EncodeSlot(slot, data, staging_buffer_.data() + staging_buffer_.size() - slot_bytes);
  if (staging_buffer_.size() >= kStagingBufferPages * slot_bytes) return FlushStaging();
  return Status::Ok();
}

Status PageStore::ClassifyImageRange(const Image& im, uint32_t index, uint64_t from, uint64_t to) {
  std::vector<uint8_t> buf(kStagingBufferPages * kPage);
  for (uint64_t p = from; p < to; p += kStagingBufferPages) {
    uint64_t n = std::min<uint64_t>(kStagingBufferPages, to - p);
    HLT_RETURN_IF_ERROR(io::PreadFull(im.fd, std::span(buf.data(), n * kPage), p * kPage, im.path));
    for (uint64_t i = 0; i < n; ++i) {
      std::span<const uint8_t> pg(buf.data() + i * kPage, kPage);
      uint64_t g = im.first + p + i;
      if (codec::IsAllZero(pg)) {
        state_[g] = PageState::kZero;
      } else {
        state_[g] = PageState::kImage;
        location_[g] = index;
        hash_[g] = codec::Xxh3_128(pg);
      }
    }
  }
  return Status::Ok();
}

Status PageStore::Attach(uint64_t first, uint64_t count, const std::string& path, WorkerPool* pool) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) != count * kPage) {
    ::close(fd);
    return Status::InvalidArgument(path + ": size " + std::to_string(st.st_size) + " does not match the region (" +
                                   std::to_string(count * kPage) + " bytes)");
  }
  uint32_t index = uint32_t(images_.size());
  images_.push_back(Image{first, count, fd, path});
  const Image& im = images_.back();
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  // Reading, zero-testing and hashing every page is a tenth of a save's CPU and would otherwise run alone before
  // the compression workers start; pieces of 16 MiB on the pool's workers keep both busy. Each piece writes only
  // its own pages' entries.
  constexpr uint64_t kPiecePages = 4096;
  Status result = Status::Ok();
  if (pool == nullptr || pool->size() < 2 || count <= kPiecePages) {
    result = ClassifyImageRange(im, index, 0, count);
  } else {
    std::vector<std::future<Status>> pieces;
    for (uint64_t p = 0; p < count; p += kPiecePages) {
      const uint64_t to = std::min(count, p + kPiecePages);
      pieces.push_back(pool->Submit([this, &im, index, p, to] { return ClassifyImageRange(im, index, p, to); }));
    }
    for (auto& f : pieces) {  // every piece is waited for: none may outlive `im`
      Status s = f.get();
      if (result.ok() && !s.ok()) result = std::move(s);
    }
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  return result;
}

Status PageStore::Seal() {
  if (staging_fd_ >= 0 && !staging_buffer_.empty()) return FlushStaging();
  return Status::Ok();
}

Status PageStore::Read(uint64_t page, uint8_t* out) const {
  switch (state_[page]) {
    case PageState::kStaged: {
      const uint64_t slot = location_[page];
      const size_t slot_bytes = SlotBytes();
      if (slot >= staging_flushed_) {  // still in the buffer (only before Seal)
        return DecodeSlot(slot, std::span(staging_buffer_).subspan((slot - staging_flushed_) * slot_bytes, slot_bytes),
                          out);
      }
      if (!staging_key_) return io::PreadFull(staging_fd_, std::span(out, kPage), slot * kPage, "page staging file");
      thread_local std::vector<uint8_t> stored;
      stored.resize(slot_bytes);
      HLT_RETURN_IF_ERROR(io::PreadFull(staging_fd_, stored, slot * slot_bytes, "page staging file"));
      return DecodeSlot(slot, stored, out);
    }
    case PageState::kImage: {
      const Image& im = images_[location_[page]];
      return io::PreadFull(im.fd, std::span(out, kPage), (page - im.first) * kPage, im.path);
    }
    default:
      return Status::Internal("page " + std::to_string(page) + " has no stored content");
  }
}

}  // namespace halite::writer
