// The host block cache (halite/block_cache.h): lookups, inserts and drops of entries, and the count of bytes
// shared by every process using the directory. Entry names and headers: cache_entry.h; eviction:
// cache_eviction.cc.
#include "halite/block_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "cache/cache_entry.h"
#include "cache/cache_eviction.h"
#include "halite/bytes.h"

namespace halite {

namespace {

// DIR/state: magic, then the bytes of entries in the directory (little-endian), read and written under flock.
constexpr char kStateMagic[8] = {'H', 'L', 'T', 'B', 'C', 'S', '0', '1'};
constexpr size_t kStateSize = 16;
// Eviction leaves 90% of the bound, so that it runs once per tenth of the bound inserted, not per insert.
uint64_t LowWater(uint64_t max_bytes) { return max_bytes - max_bytes / 10; }

int64_t NowNs() {
  struct timespec t;
  ::clock_gettime(CLOCK_REALTIME, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// Sets an entry's modification time (its recency for eviction) to now. The kernel's own "now" (UTIME_NOW) is the
// coarse clock, which gives a burst of inserts the same time; an explicit time needs ownership of the file,
// so an entry another user wrote falls back to UTIME_NOW (write permission is enough for that).
void Touch(int fd) {
  const int64_t now = NowNs();
  struct timespec times[2] = {{0, UTIME_OMIT}, {now / 1000000000, now % 1000000000}};
  if (::futimens(fd, times) != 0) {
    times[1] = {0, UTIME_NOW};
    (void)::futimens(fd, times);
  }
}

// Holds the cache's lock: the in-process mutex (an flock is shared by the threads of a process) and the flock
// on DIR/state (other processes).
class StateLock {
 public:
  StateLock(std::mutex& mu, int fd) : guard_(mu), fd_(fd) {
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~StateLock() { (void)::flock(fd_, LOCK_UN); }

 private:
  std::lock_guard<std::mutex> guard_;
  int fd_;
};

Result<uint64_t> ParseSize(const std::string& text) {
  uint64_t mult = 1;
  std::string digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': mult = uint64_t{1} << 10; break;
      case 'M': case 'm': mult = uint64_t{1} << 20; break;
      case 'G': case 'g': mult = uint64_t{1} << 30; break;
      case 'T': case 't': mult = uint64_t{1} << 40; break;
      default: break;
    }
    if (mult != 1) digits.pop_back();
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = digits.empty() || digits[0] == '-' ? 0 : std::strtoull(digits.c_str(), &end, 10);
  if (digits.empty() || errno != 0 || !end || *end != '\0' || v == 0 || v > UINT64_MAX / mult) {
    return Status::InvalidArgument("HALITE_BLOCK_CACHE_SIZE: expected a positive byte count (K/M/G/T suffixes), got \"" +
                                   text + "\"");
  }
  return uint64_t(v) * mult;
}

}  // namespace

class HALITE_HIDDEN BlockCache::Impl {
 public:
  ~Impl() {
    if (state_fd_ >= 0) ::close(state_fd_);
    if (dir_fd_ >= 0) ::close(dir_fd_);
  }

  Status Open(const std::string& dir, const BlockCacheOptions& options) {
    dir_ = dir;
    max_bytes_ = options.max_bytes;
    if (max_bytes_ == 0) return Status::InvalidArgument(dir + ": a block cache needs a size above 0");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IoError(dir + ": cannot create the block cache directory: " + ec.message(), ec.value());
    dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) return Status::IoError(dir + ": cannot open the block cache directory", errno);
    if (::mkdirat(dir_fd_, "tmp", 0777) != 0 && errno != EEXIST) {
      return Status::IoError(dir + "/tmp: cannot create", errno);
    }
    state_fd_ = ::openat(dir_fd_, "state", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (state_fd_ < 0) return Status::IoError(dir + "/state: cannot open the block cache's state for writing", errno);
    StateLock lock(mu_, state_fd_);
    uint8_t buf[kStateSize];
    if (::pread(state_fd_, buf, kStateSize, 0) == ssize_t(kStateSize) && std::memcmp(buf, kStateMagic, 8) == 0) {
      return Status::Ok();
    }
    // A new directory (or a state file torn by a crash): count what is there.
    HLT_ASSIGN_OR_RETURN(uint64_t bytes, cache::CountEntryBytes(dir_fd_, dir_));
    return WriteCount(bytes);
  }

  bool Lookup(const BlockCacheKey& key, std::span<uint8_t> payload) {
    const std::string path = cache::EntryPath(key);
    int fd = payload.size() == key.stored_length ? ::openat(dir_fd_, path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    std::array<uint8_t, cache::kEntryHeaderSize> header;
    struct iovec iov[2] = {{header.data(), header.size()}, {payload.data(), payload.size()}};
    struct stat st;
    const bool sized = ::fstat(fd, &st) == 0 && uint64_t(st.st_size) == cache::EntrySize(key);
    const bool read = sized && ::preadv(fd, iov, 2, 0) == ssize_t(cache::EntrySize(key));
    if (read && cache::EntryHeaderMatches(header, key)) {
      Touch(fd);
      ::close(fd);
      hits_.fetch_add(1, std::memory_order_relaxed);
      hit_bytes_.fetch_add(payload.size(), std::memory_order_relaxed);
      return true;
    }
    ::close(fd);
    misses_.fetch_add(1, std::memory_order_relaxed);
    if (sized && !read) return false;  // a read error of the cache's disk: leave the entry, fetch the block
    Drop(key);  // torn (wrong size) or not this block's
    return false;
  }

  Status Insert(const BlockCacheKey& key, std::span<const uint8_t> payload) {
    Status s = TryInsert(key, payload);
    if (!s.ok()) insert_failures_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }

  void Drop(const BlockCacheKey& key) {
    const std::string path = cache::EntryPath(key);
    StateLock lock(mu_, state_fd_);
    if (::unlinkat(dir_fd_, path.c_str(), 0) != 0) return;
    dropped_.fetch_add(1, std::memory_order_relaxed);
    // What its insert counted (a torn file is shorter on disk than it was when counted).
    const uint64_t size = cache::EntrySize(key);
    auto count = ReadCount();
    if (count) (void)WriteCount(*count > size ? *count - size : 0);
  }

  Result<uint64_t> SizeBytes() {
    StateLock lock(mu_, state_fd_);
    return ReadCount();
  }

  BlockCacheStats Stats() const {
    BlockCacheStats s;
    s.hits = hits_.load(std::memory_order_relaxed);
    s.misses = misses_.load(std::memory_order_relaxed);
    s.inserts = inserts_.load(std::memory_order_relaxed);
    s.insert_failures = insert_failures_.load(std::memory_order_relaxed);
    s.dropped = dropped_.load(std::memory_order_relaxed);
    s.evicted = evicted_.load(std::memory_order_relaxed);
    s.hit_bytes = hit_bytes_.load(std::memory_order_relaxed);
    s.inserted_bytes = inserted_bytes_.load(std::memory_order_relaxed);
    return s;
  }

  std::string dir_;
  uint64_t max_bytes_ = 0;

 private:
  Status TryInsert(const BlockCacheKey& key, std::span<const uint8_t> payload) {
    const std::string path = cache::EntryPath(key);
    const std::string where = dir_ + "/" + path;
    if (payload.size() != key.stored_length) {
      return Status::InvalidArgument(fmt::format("{}: payload of {} bytes for a block of {}", where, payload.size(),
                                                 key.stored_length));
    }
    const uint64_t size = cache::EntrySize(key);
    if (size > max_bytes_ / 2) return Status::InvalidArgument(where + ": the entry is larger than half the cache");
    struct stat st;
    if (::fstatat(dir_fd_, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return Status::Ok();  // there already
    const std::string sub = path.substr(0, path.find('/'));
    if (::mkdirat(dir_fd_, sub.c_str(), 0777) != 0 && errno != EEXIST) {
      return Status::IoError(dir_ + "/" + sub + ": cannot create", errno);
    }
    // Written whole before it gets its name: another process sees the entry complete or not at all.
    TempFile temp;
    HLT_RETURN_IF_ERROR(temp.Create(dir_fd_, dir_));
    const auto header = cache::EncodeEntryHeader(key);
    struct iovec iov[2] = {{const_cast<uint8_t*>(header.data()), header.size()},
                           {const_cast<uint8_t*>(payload.data()), payload.size()}};
    const ssize_t n = ::pwritev(temp.fd, iov, 2, 0);
    if (n != ssize_t(size)) return Status::IoError(where + ": cannot write the entry", n < 0 ? errno : ENOSPC);
    Touch(temp.fd);

    StateLock lock(mu_, state_fd_);
    HLT_ASSIGN_OR_RETURN(bool linked, temp.Link(dir_fd_, path, where));
    if (!linked) return Status::Ok();  // another process inserted the same block meanwhile
    inserts_.fetch_add(1, std::memory_order_relaxed);
    inserted_bytes_.fetch_add(payload.size(), std::memory_order_relaxed);
    HLT_ASSIGN_OR_RETURN(uint64_t count, ReadCount());
    count += size;
    if (count > max_bytes_) {
      HLT_ASSIGN_OR_RETURN(cache::EvictionResult r,
                           cache::EvictLeastRecentlyUsed(dir_fd_, LowWater(max_bytes_), dir_));
      evicted_.fetch_add(r.entries_deleted, std::memory_order_relaxed);
      count = r.bytes_after;
    }
    return WriteCount(count);
  }

  // An unnamed file (O_TMPFILE) given its name by linkat, or, where the file system has no O_TMPFILE, a named
  // one in DIR/tmp (a leftover of a kill is removed by a later eviction).
  struct TempFile {
    int fd = -1;
    int dir_fd = -1;
    std::string temp_name;  // empty for O_TMPFILE
    ~TempFile() {
      if (fd >= 0) ::close(fd);
      if (!temp_name.empty()) (void)::unlinkat(dir_fd, temp_name.c_str(), 0);
    }
    Status Create(int dfd, const std::string& dir) {
      dir_fd = dfd;
      fd = ::openat(dfd, "tmp", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
      if (fd >= 0) return Status::Ok();
      static std::atomic<uint64_t> counter{0};
      temp_name = fmt::format("tmp/{}.{}.{}", ::getpid(), NowNs(), counter.fetch_add(1));
      fd = ::openat(dfd, temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd < 0) {
        int e = errno;
        temp_name.clear();
        return Status::IoError(dir + "/tmp: cannot create a temporary entry", e);
      }
      return Status::Ok();
    }
    // Gives the file its name unless that name exists (false then). linkat never replaces.
    Result<bool> Link(int dfd, const std::string& path, const std::string& where) {
      int r;
      if (temp_name.empty()) {
        const std::string proc = "/proc/self/fd/" + std::to_string(fd);
        r = ::linkat(AT_FDCWD, proc.c_str(), dfd, path.c_str(), AT_SYMLINK_FOLLOW);
      } else {
        r = ::linkat(dfd, temp_name.c_str(), dfd, path.c_str(), 0);
      }
      if (r == 0) return true;
      if (errno == EEXIST) return false;
      return Status::IoError(where + ": cannot name the entry", errno);
    }
  };

  Result<uint64_t> ReadCount() {
    uint8_t buf[kStateSize];
    if (::pread(state_fd_, buf, kStateSize, 0) != ssize_t(kStateSize) || std::memcmp(buf, kStateMagic, 8) != 0) {
      // Torn or emptied: the listing is the truth.
      return cache::CountEntryBytes(dir_fd_, dir_);
    }
    return halite::LoadLe64(buf + 8);
  }

  Status WriteCount(uint64_t bytes) {
    uint8_t buf[kStateSize];
    std::memcpy(buf, kStateMagic, 8);
    halite::StoreLe64(buf + 8, bytes);
    if (::pwrite(state_fd_, buf, kStateSize, 0) != ssize_t(kStateSize)) {
      return Status::IoError(dir_ + "/state: cannot write the block cache's count", errno);
    }
    return Status::Ok();
  }

  int dir_fd_ = -1;
  int state_fd_ = -1;
  std::mutex mu_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, inserts_{0}, insert_failures_{0}, dropped_{0}, evicted_{0};
  std::atomic<uint64_t> hit_bytes_{0}, inserted_bytes_{0};
};

BlockCache::BlockCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockCache::~BlockCache() = default;

Result<std::shared_ptr<BlockCache>> BlockCache::Open(const std::string& dir, BlockCacheOptions options) {
  auto impl = std::make_unique<Impl>();
  HLT_RETURN_IF_ERROR(impl->Open(dir, options));
  return std::shared_ptr<BlockCache>(new BlockCache(std::move(impl)));
}

Result<std::shared_ptr<BlockCache>> BlockCache::FromEnvironment() {
  const char* dir = std::getenv("HALITE_BLOCK_CACHE");
  if (!dir || !*dir) return std::shared_ptr<BlockCache>();
  BlockCacheOptions options;
  if (const char* size = std::getenv("HALITE_BLOCK_CACHE_SIZE"); size && *size) {
    HLT_ASSIGN_OR_RETURN(options.max_bytes, ParseSize(size));
  }
  auto cache = Open(dir, options);
  if (!cache) return cache.error().WithContext("HALITE_BLOCK_CACHE");
  return cache;
}

Result<std::shared_ptr<BlockCache>> BlockCache::OpenChosen(const std::string& dir, uint64_t max_bytes) {
  if (dir.empty()) {
    HLT_ASSIGN_OR_RETURN(auto cache, FromEnvironment());
    if (cache && max_bytes) return Open(cache->dir(), {max_bytes});
    return cache;
  }
  BlockCacheOptions options;
  if (max_bytes) {
    options.max_bytes = max_bytes;
  } else if (const char* size = std::getenv("HALITE_BLOCK_CACHE_SIZE"); size && *size) {
    HLT_ASSIGN_OR_RETURN(options.max_bytes, ParseSize(size));
  }
  return Open(dir, options);
}

std::vector<std::string> BlockCache::CommandLineFlags() const {
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(dir(), ec);
  return {"--block-cache", ec ? dir() : absolute.string(), "--block-cache-size", std::to_string(max_bytes())};
}

const std::string& BlockCache::dir() const { return impl_->dir_; }
uint64_t BlockCache::max_bytes() const { return impl_->max_bytes_; }
bool BlockCache::Lookup(const BlockCacheKey& key, std::span<uint8_t> payload) { return impl_->Lookup(key, payload); }
Status BlockCache::Insert(const BlockCacheKey& key, std::span<const uint8_t> payload) {
  return impl_->Insert(key, payload);
}
void BlockCache::Drop(const BlockCacheKey& key) { impl_->Drop(key); }
BlockCacheStats BlockCache::stats() const { return impl_->Stats(); }
Result<uint64_t> BlockCache::SizeBytes() const { return impl_->SizeBytes(); }

}  // namespace halite
