// Thin wrappers over the userfaultfd system call and ioctls, with errno turned into results. userfaultfd.cc is
// the only file that includes <linux/userfaultfd.h>; lazy_memory.cc uses these.
#ifndef HALITE_ENGINE_USERFAULTFD_H_
#define HALITE_ENGINE_USERFAULTFD_H_

#include <cstdint>
#include <string>

#include "halite/status.h"

namespace halite::engine {

struct Userfaultfd {
  int fd = -1;
  std::string mode;  // "syscall", "/dev/userfaultfd" or "syscall user-mode-only"
};

// Opens a non-blocking, close-on-exec userfaultfd with the UNMAP and REMOVE events (and MISSING_SHMEM when
// `shmem`), trying the system call, then /dev/userfaultfd, then user-mode-only faults.
// Errors: kUnsupported explaining each attempt and what would enable one.
Result<Userfaultfd> OpenUserfaultfd(bool shmem);

// Registers [addr, addr+len) for missing-page faults; *has_zeropage says whether UFFDIO_ZEROPAGE works there.
Status UffdRegister(int fd, void* addr, uint64_t len, bool* has_zeropage);
void UffdUnregister(int fd, void* addr, uint64_t len);

// The outcome of a copy or zero-page ioctl: how many bytes were filled before it stopped, and the errno that
// stopped it (0 when all of it was filled).
struct UffdFill {
  uint64_t done = 0;
  int err = 0;
};
// `wake` false defers waking the threads waiting on the range to a later UffdWake.
UffdFill UffdCopy(int fd, uint64_t dst, const void* src, uint64_t len, bool wake = true);
UffdFill UffdZeroPage(int fd, uint64_t dst, uint64_t len, bool wake = true);
int UffdWake(int fd, uint64_t dst, uint64_t len);  // 0 or errno

// One message read from the userfaultfd.
struct UffdMessage {
  enum Kind { kNone, kPageFault, kRemove, kUnmap, kOther } kind = kNone;
  uint64_t address = 0;         // kPageFault
  bool write = false;           // kPageFault
  uint64_t start = 0, end = 0;  // kRemove, kUnmap
};
// Reads one message; kNone when none is pending (EAGAIN). Errors: kIoError.
Result<UffdMessage> UffdRead(int fd);

}  // namespace halite::engine

#endif  // HALITE_ENGINE_USERFAULTFD_H_
