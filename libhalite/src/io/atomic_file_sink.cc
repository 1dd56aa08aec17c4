// The crash-safe output file: nothing appears under the final name until it is complete and synced.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "halite/bytes.h"
#include "halite/storage.h"
#include "io/posix_io.h"
#include "io/uring_batch.h"

namespace halite {
namespace {

constexpr size_t kBufferBytes = 1 << 20;
constexpr const char* kTempMarker = ".hlt-tmp.";

std::string DirName(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
std::string BaseName(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Temporary names look like ".NAME.hlt-tmp.PID.RANDOM"; a save killed in the short window where one exists
// leaves it behind, so each new save of NAME removes those whose process is gone.
std::string TempName(const std::string& dir, const std::string& base) {
  std::random_device rd;
  return dir + "/." + base + kTempMarker + std::to_string(::getpid()) + "." + std::to_string(rd());
}

void RemoveStaleTemps(const std::string& dir, const std::string& base) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::string prefix = "." + base + kTempMarker;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(prefix, 0) != 0) continue;
    long pid = std::strtol(n.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM)) continue;  // its saver still runs
    ::unlinkat(::dirfd(d), n.c_str(), 0);
  }
  ::closedir(d);
}

Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(dir + ": cannot open directory to sync", errno);
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError(dir + ": directory fsync failed", e);
  return Status::Ok();
}

// An output file that has no name (O_TMPFILE) or a temporary one until Publish().
class UnpublishedFile {
 public:
  UnpublishedFile(std::string path) : path_(std::move(path)), dir_(DirName(path_)), base_(BaseName(path_)) {}
  ~UnpublishedFile() { Discard(); }
  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }
  int fd() const { return fd_; }

  Status Open() {
    RemoveStaleTemps(dir_, base_);
    fd_ = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT) {
        return Status::IoError(path_ + ": cannot create the output in " + dir_, errno);
      }
      // No O_TMPFILE on this file system: a named temporary, renamed into place.
      temp_path_ = TempName(dir_, base_);
      fd_ = ::open(temp_path_.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
      if (fd_ < 0) return Status::IoError(temp_path_ + ": cannot create temporary output", errno);
    }
    return Status::Ok();
  }

  // fsync (when `sync`), give the file its final name atomically, fsync the directory.
  Status Publish(bool sync) {
    if (sync && ::fsync(fd_) != 0) return Status::IoError(path_ + ": fsync failed", errno);
    if (temp_path_.empty()) {
      // linkat cannot replace, so an existing target is replaced through a temporary name and rename(2).
      std::string proc = "/proc/self/fd/" + std::to_string(fd_);
      if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, path_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
        if (errno != EEXIST) return Status::IoError(path_ + ": cannot link the finished file into place", errno);
        temp_path_ = TempName(dir_, base_);
        if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, temp_path_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
          int e = errno;
          temp_path_.clear();
          return Status::IoError(path_ + ": cannot link the finished file into place", e);
        }
      }
    }
    if (!temp_path_.empty()) {
      if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
        return Status::IoError(path_ + ": cannot rename " + temp_path_ + " into place", errno);
      }
      temp_path_.clear();
    }
    ::close(fd_);
    fd_ = -1;
    if (sync) HLT_RETURN_IF_ERROR(SyncDir(dir_));
    return Status::Ok();
  }

  void Discard() {
    if (fd_ >= 0) {
      ::close(fd_);  // an O_TMPFILE file vanishes with its last descriptor
      fd_ = -1;
    }
    if (!temp_path_.empty()) {
      ::unlink(temp_path_.c_str());
      temp_path_.clear();
    }
  }

 private:
  std::string path_, dir_, base_, temp_path_;
  int fd_ = -1;
};

class AtomicFileSink final : public AppendSink {
 public:
  AtomicFileSink(std::string path, FileSinkOptions opt) : file_(std::move(path)), opt_(opt) {}
  ~AtomicFileSink() override { Abort(); }

  Status Open() {
    HLT_RETURN_IF_ERROR(file_.Open());
    open_ = true;
    if (opt_.use_io_uring) uring_ = io::UringAppender::Create(file_.fd());
    buffer_.reserve(kBufferBytes);
    return Status::Ok();
  }

  const std::string& name() const override { return file_.path(); }
  uint64_t position() const override { return position_; }

  Status Append(std::span<const uint8_t> data) override {
    if (!open_) return Status::Internal(name() + ": append after commit or abort");
    position_ += data.size();
    while (!data.empty()) {
      size_t n = std::min(data.size(), kBufferBytes - buffer_.size());
      buffer_.insert(buffer_.end(), data.begin(), data.begin() + n);
      data = data.subspan(n);
      if (buffer_.size() == kBufferBytes) HLT_RETURN_IF_ERROR(Flush());
    }
    return Status::Ok();
  }

  Status Commit() override {
    if (!open_) return Status::Internal(name() + ": commit after commit or abort");
    Status s = Flush();
    if (s.ok() && uring_) s = uring_->Drain(name());
    uring_.reset();
    if (s.ok()) s = file_.Publish(opt_.sync);
    if (!s.ok()) {
      Abort();
      return s;
    }
    open_ = false;
    return Status::Ok();
  }

  void Abort() override {
    uring_.reset();
    file_.Discard();
    open_ = false;
  }

 private:
  Status Flush() {
    if (buffer_.empty()) return Status::Ok();
    if (uring_) {
      HLT_RETURN_IF_ERROR(uring_->Write(written_, buffer_, name()));
    } else {
      HLT_RETURN_IF_ERROR(io::PwriteFull(file_.fd(), buffer_, written_, name()));
    }
    written_ += buffer_.size();
    buffer_.clear();
    return Status::Ok();
  }

  UnpublishedFile file_;
  FileSinkOptions opt_;
  bool open_ = false;
  uint64_t position_ = 0;
  uint64_t written_ = 0;
  std::vector<uint8_t> buffer_;
  std::unique_ptr<io::UringAppender> uring_;
};

class AtomicPositionalFile final : public PositionalOutputFile {
 public:
  AtomicPositionalFile(std::string path, bool sync) : file_(std::move(path)), sync_(sync) {}
  ~AtomicPositionalFile() override { Abort(); }
  Status Open(uint64_t size) {
    HLT_RETURN_IF_ERROR(file_.Open());
    if (::ftruncate(file_.fd(), off_t(size)) != 0) return Status::IoError(name() + ": cannot size the output", errno);
    return Status::Ok();
  }
  const std::string& name() const override { return file_.path(); }
  Status WriteAt(uint64_t offset, std::span<const uint8_t> data) override {
    return io::PwriteFull(file_.fd(), data, offset, name());
  }
  Status Commit() override {
    Status s = file_.Publish(sync_);
    if (!s.ok()) Abort();
    return s;
  }
  void Abort() override { file_.Discard(); }

 private:
  UnpublishedFile file_;
  bool sync_;
};

class MemorySink final : public AppendSink {
 public:
  MemorySink(std::string name, std::vector<uint8_t>* out) : name_(std::move(name)), out_(out) {}
  const std::string& name() const override { return name_; }
  uint64_t position() const override { return bytes_.size(); }
  Status Append(std::span<const uint8_t> d) override {
    bytes_.insert(bytes_.end(), d.begin(), d.end());
    return Status::Ok();
  }
  Status Commit() override {
    *out_ = std::move(bytes_);
    bytes_.clear();
    return Status::Ok();
  }
  void Abort() override { bytes_.clear(); }

 private:
  std::string name_;
  std::vector<uint8_t>* out_;
  std::vector<uint8_t> bytes_;
};

}  // namespace

Result<std::unique_ptr<AppendSink>> CreateAtomicFileSink(const std::string& path, FileSinkOptions options) {
  auto sink = std::make_unique<AtomicFileSink>(path, options);
  HLT_RETURN_IF_ERROR(sink->Open());
  return std::unique_ptr<AppendSink>(std::move(sink));
}

Result<std::unique_ptr<PositionalOutputFile>> CreateAtomicOutputFile(const std::string& path, uint64_t size,
                                                                     bool sync) {
  auto f = std::make_unique<AtomicPositionalFile>(path, sync);
  HLT_RETURN_IF_ERROR(f->Open(size));
  return std::unique_ptr<PositionalOutputFile>(std::move(f));
}

std::unique_ptr<AppendSink> NewMemorySink(std::string name, std::vector<uint8_t>* out) {
  return std::make_unique<MemorySink>(std::move(name), out);
}

}  // namespace halite
