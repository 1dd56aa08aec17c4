// The userfaultfd operations a restorer needs when it fills memory registered by someone else: a VMM's own
// userfaultfd duplicated into this process (pidfd_getfd), or one a test registers itself. The library's lazy
// memory (lazy_memory.h) uses the same wrappers internally; this header lets integrations and tools reuse them
// without including <linux/userfaultfd.h>.
//
// Every function takes a userfaultfd the caller owns and keeps; none of them reads fault messages. All are
// thread-safe in the kernel's sense (several threads may fill disjoint ranges of one userfaultfd at once).
#ifndef HALITE_USERFAULTFD_OPS_H_
#define HALITE_USERFAULTFD_OPS_H_

#include <cstdint>

#include "halite/export.h"
#include "halite/status.h"

namespace halite::uffd {

// Opens a non-blocking, close-on-exec userfaultfd (the caller closes it). Errors: kUnsupported saying what
// would enable one (root, vm.unprivileged_userfaultfd, /dev/userfaultfd).
HALITE_EXPORT Result<int> Open();
// Registers [addr, addr+len) for missing-page faults. Errors: kIoError (EINVAL: not page aligned, or memory
// userfaultfd cannot serve), kUnsupported (no UFFDIO_COPY there).
HALITE_EXPORT Status Register(int fd, void* addr, uint64_t len);

// How a fill ended: `done` bytes were filled from the start of the range, then `err` (an errno) stopped it; err
// is 0 when the whole range was filled. EEXIST: the page at dst + done is populated already. EAGAIN with done
// < len: a partial fill (or the address space was changing): continue from dst + done. ESRCH/ENOSPC: the
// registering process's memory is gone (it exited).
struct Fill {
  uint64_t done = 0;
  int err = 0;
};
// Copies len bytes (whole pages) from src in this process to dst in the registering process. With wake false
// the threads waiting on the range sleep until Wake.
HALITE_EXPORT Fill Copy(int fd, uint64_t dst, const void* src, uint64_t len, bool wake);
// Maps the zero page over [dst, dst+len).
HALITE_EXPORT Fill ZeroPage(int fd, uint64_t dst, uint64_t len, bool wake);
// Wakes the threads waiting on [dst, dst+len); returns 0 or an errno.
HALITE_EXPORT int Wake(int fd, uint64_t dst, uint64_t len);

}  // namespace halite::uffd

#endif  // HALITE_USERFAULTFD_OPS_H_
