#include "io/posix_io.h"

#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "format/byte_order.h"

namespace halite::io {
namespace {
bool TransientErrno(int e) { return e == EIO || e == EAGAIN || e == ENOMEM; }
}  // namespace

Status PreadFull(int fd, std::span<uint8_t> buf, uint64_t offset, const std::string& name) {
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::pread(fd, buf.data() + done, buf.size() - done, off_t(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      return Status::IoError(name + ": read at offset " + fmt::format("{:#x}", offset + done) + " failed", e)
          .set_retryable(TransientErrno(e));
    }
    if (n == 0) {
      return Status::IoError(name + ": short read at offset " + fmt::format("{:#x}", offset + done) + " (file changed?)")
          .set_retryable(true);
    }
    done += size_t(n);
  }
  return Status::Ok();
}

Status PwriteFull(int fd, std::span<const uint8_t> data, uint64_t offset, const std::string& name) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, off_t(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      return Status::IoError(name + ": write at offset " + fmt::format("{:#x}", offset + done) + " failed", e)
          .set_retryable(TransientErrno(e));
    }
    if (n == 0) return Status::IoError(name + ": write at offset " + fmt::format("{:#x}", offset + done) + " wrote nothing");
    done += size_t(n);
  }
  return Status::Ok();
}

}  // namespace halite::io
