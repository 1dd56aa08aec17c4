#include "engine/userfaultfd.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace halite::engine {
namespace {

std::string Errno(int e) { return std::string(std::strerror(e)); }

// Negotiates the API on a fresh descriptor; closes it on failure.
Status Negotiate(int fd, bool shmem) {
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP;
  if (shmem) api.features |= UFFD_FEATURE_MISSING_SHMEM;
  if (ioctl(fd, UFFDIO_API, &api) != 0) {
    int e = errno;
    close(fd);
    return Status(StatusCode::kUnsupported,
                  "UFFDIO_API with the REMOVE/UNMAP events" + std::string(shmem ? " and shmem" : "") +
                      " failed: " + Errno(e) + " (kernel older than 4.11?)",
                  e);
  }
  return Status::Ok();
}

}  // namespace

Result<Userfaultfd> OpenUserfaultfd(bool shmem) {
  std::string why;
  long fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0) {
    HLT_RETURN_IF_ERROR(Negotiate(int(fd), shmem));
    return Userfaultfd{int(fd), "syscall"};
  }
  int e = errno;
  if (e == ENOSYS) {
    return Status(StatusCode::kUnsupported,
                  "userfaultfd: the kernel has no userfaultfd (ENOSYS; CONFIG_USERFAULTFD is off, or a "
                  "seccomp filter such as a container runtime's blocks the system call)",
                  e);
  }
  why = "userfaultfd(2): " + Errno(e);
  int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev >= 0) {
    int ufd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    int e2 = errno;
    close(dev);
    if (ufd >= 0) {
      HLT_RETURN_IF_ERROR(Negotiate(ufd, shmem));
      return Userfaultfd{ufd, "/dev/userfaultfd"};
    }
    why += "; /dev/userfaultfd: " + Errno(e2);
  } else {
    why += "; /dev/userfaultfd: " + Errno(errno);
  }
  fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (fd >= 0) {
    HLT_RETURN_IF_ERROR(Negotiate(int(fd), shmem));
    return Userfaultfd{int(fd), "syscall user-mode-only"};
  }
  why += "; userfaultfd(UFFD_USER_MODE_ONLY): " + Errno(errno);
  return Status(StatusCode::kUnsupported,
                "userfaultfd is not available to this process (" + why +
                    "): run as root (CAP_SYS_PTRACE), set sysctl vm.unprivileged_userfaultfd=1, or give "
                    "the user read-write access to /dev/userfaultfd",
                e);
}

Status UffdRegister(int fd, void* addr, uint64_t len, bool* has_zeropage) {
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uint64_t>(addr);
  reg.range.len = len;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0) {
    int e = errno;
    return Status::IoError("UFFDIO_REGISTER of " + std::to_string(len) + " bytes failed: " + Errno(e) +
                               (e == EINVAL ? " (memory of a kind userfaultfd cannot serve, or not page aligned)" : ""),
                           e);
  }
  if (!(reg.ioctls & (uint64_t{1} << _UFFDIO_COPY))) {
    UffdUnregister(fd, addr, len);
    return Status::Unsupported("userfaultfd: UFFDIO_COPY is not available for this memory");
  }
  *has_zeropage = reg.ioctls & (uint64_t{1} << _UFFDIO_ZEROPAGE);
  return Status::Ok();
}

void UffdUnregister(int fd, void* addr, uint64_t len) {
  uffdio_range r{reinterpret_cast<uint64_t>(addr), len};
  (void)ioctl(fd, UFFDIO_UNREGISTER, &r);
}

UffdFill UffdCopy(int fd, uint64_t dst, const void* src, uint64_t len, bool wake) {
  uffdio_copy c{};
  c.dst = dst;
  c.src = reinterpret_cast<uint64_t>(src);
  c.len = len;
  c.mode = wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE;
  if (ioctl(fd, UFFDIO_COPY, &c) == 0) return {len, 0};
  // A partial copy reports the bytes done in c.copy (and EAGAIN); a failure at the first page, -errno.
  if (c.copy > 0) return {uint64_t(c.copy), errno ? errno : EAGAIN};
  return {0, c.copy < 0 ? int(-c.copy) : errno};
}

UffdFill UffdZeroPage(int fd, uint64_t dst, uint64_t len, bool wake) {
  uffdio_zeropage z{};
  z.range.start = dst;
  z.range.len = len;
  z.mode = wake ? 0 : UFFDIO_ZEROPAGE_MODE_DONTWAKE;
  if (ioctl(fd, UFFDIO_ZEROPAGE, &z) == 0) return {len, 0};
  if (z.zeropage > 0) return {uint64_t(z.zeropage), errno ? errno : EAGAIN};
  return {0, z.zeropage < 0 ? int(-z.zeropage) : errno};
}

int UffdWake(int fd, uint64_t dst, uint64_t len) {
  uffdio_range r{dst, len};
  return ioctl(fd, UFFDIO_WAKE, &r) == 0 ? 0 : errno;
}

Result<UffdMessage> UffdRead(int fd) {
  uffd_msg msg;
  ssize_t n = read(fd, &msg, sizeof msg);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return UffdMessage{};
    return Status::IoError("reading the userfaultfd failed: " + Errno(errno), errno);
  }
  if (size_t(n) != sizeof msg) return Status::IoError("short read from the userfaultfd");
  UffdMessage m;
  switch (msg.event) {
    case UFFD_EVENT_PAGEFAULT:
      m.kind = UffdMessage::kPageFault;
      m.address = msg.arg.pagefault.address;
      m.write = msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE;
      break;
    case UFFD_EVENT_REMOVE:
    case UFFD_EVENT_UNMAP:
      m.kind = msg.event == UFFD_EVENT_REMOVE ? UffdMessage::kRemove : UffdMessage::kUnmap;
      m.start = msg.arg.remove.start;
      m.end = msg.arg.remove.end;
      break;
    default:
      m.kind = UffdMessage::kOther;
  }
  return m;
}

}  // namespace halite::engine
