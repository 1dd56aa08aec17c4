// Local file reading: pread for single reads, io_uring (when built and available) for batches.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>

#include <fmt/format.h>

#include "halite/bytes.h"
#include "halite/storage.h"
#include "io/posix_io.h"
#include "io/uring_batch.h"

namespace halite {

Status RandomAccessFile::ReadBatch(std::span<ReadRequest> requests) {
  Status first;
  for (auto& r : requests) {
    r.status = ReadAt(r.offset, r.buffer);
    if (!r.status.ok() && first.ok()) first = r.status;
  }
  return first;
}

namespace {

class LocalFile final : public RandomAccessFile {
 public:
  LocalFile(std::string name, int fd, uint64_t size, bool use_uring) : name_(std::move(name)), fd_(fd), size_(size) {
    if (use_uring) uring_ = io::UringBatchReader::Create(fd_);
  }
  ~LocalFile() override { ::close(fd_); }
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }

  Status ReadAt(uint64_t offset, std::span<uint8_t> buf) override {
    if (offset > size_ || buf.size() > size_ - offset) {
      return Status::InvalidArgument(name_ + ": read of " + std::to_string(buf.size()) + " bytes at offset " +
                                     fmt::format("{:#x}", offset) + " is outside the file (" + std::to_string(size_) + " bytes)");
    }
    requests_.fetch_add(1, std::memory_order_relaxed);
    Status s = io::PreadFull(fd_, buf, offset, name_);
    if (s.ok()) bytes_.fetch_add(buf.size(), std::memory_order_relaxed);
    return s;
  }

  Status ReadBatch(std::span<ReadRequest> requests) override {
    if (uring_ && requests.size() > 1) {
      for (auto& r : requests) {
        if (r.offset > size_ || r.buffer.size() > size_ - r.offset) return ReadAt(r.offset, r.buffer);
      }
      requests_.fetch_add(requests.size(), std::memory_order_relaxed);
      Status s;
      {
        std::lock_guard<std::mutex> lock(uring_mu_);
        s = uring_->Read(requests, name_);
      }
      for (const auto& r : requests) {
        if (r.status.ok()) bytes_.fetch_add(r.buffer.size(), std::memory_order_relaxed);
      }
      return s;
    }
    return RandomAccessFile::ReadBatch(requests);
  }

  ReadCounters counters() const override {
    return ReadCounters{requests_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed)};
  }

 private:
  std::string name_;
  int fd_;
  uint64_t size_;
  std::mutex uring_mu_;
  std::unique_ptr<io::UringBatchReader> uring_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_{0};
};

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(std::string name, std::vector<uint8_t> bytes) : name_(std::move(name)), bytes_(std::move(bytes)) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> buf) override {
    if (offset > bytes_.size() || buf.size() > bytes_.size() - offset) {
      return Status::InvalidArgument(name_ + ": read at offset " + fmt::format("{:#x}", offset) + " is outside the file");
    }
    std::copy_n(bytes_.begin() + offset, buf.size(), buf.begin());
    return Status::Ok();
  }

 private:
  std::string name_;
  std::vector<uint8_t> bytes_;
};

}  // namespace

Result<std::unique_ptr<RandomAccessFile>> OpenLocalFile(const std::string& path, FileOpenOptions options) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::IoError(path + ": cannot stat", e);
  }
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file");
  }
  return std::unique_ptr<RandomAccessFile>(new LocalFile(path, fd, uint64_t(st.st_size), options.use_io_uring));
}

std::unique_ptr<RandomAccessFile> NewMemoryFile(std::string name, std::vector<uint8_t> bytes) {
  return std::make_unique<MemoryFile>(std::move(name), std::move(bytes));
}

}  // namespace halite
