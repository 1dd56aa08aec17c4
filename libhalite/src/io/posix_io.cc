#include "io/posix_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include <fmt/format.h>

#include "halite/bytes.h"

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

Status WriteStreamFull(int fd, bool is_socket, std::span<const uint8_t> data, const std::string& name, uint64_t offset,
                       int stall_timeout_ms, uint64_t* written) {
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  size_t done = 0;
  auto fail = [&](const std::string& what, int e) {
    if (written != nullptr) *written = done;
    return Status::IoError(fmt::format("{}: offset {:#x}: {}", name, offset + done, what), e);
  };
  while (done < data.size()) {
    // Wait in short slices so that a peer which stopped reading is noticed.
    pollfd pfd{fd, POLLOUT, 0};
    const int pr = poll(&pfd, 1, 100);
    if (pr < 0 && errno != EINTR) return fail("poll failed", errno);
    if (pr <= 0) {
      if (stall_timeout_ms > 0 && Clock::now() - last_progress > std::chrono::milliseconds(stall_timeout_ms)) {
        return fail(fmt::format("peer stopped reading for {} ms", stall_timeout_ms), 0);
      }
      continue;
    }
    const size_t left = data.size() - done;
    const ssize_t n = is_socket ? ::send(fd, data.data() + done, left, MSG_NOSIGNAL | MSG_DONTWAIT)
                                : ::write(fd, data.data() + done, left);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return fail("write failed", errno);
    }
    done += size_t(n);
    last_progress = Clock::now();
  }
  if (written != nullptr) *written = done;
  return Status::Ok();
}

}  // namespace halite::io
