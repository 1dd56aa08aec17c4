// halite/userfaultfd_ops.h: the public face of the internal wrappers (engine/userfaultfd.h).
#include "halite/userfaultfd_ops.h"

#include "engine/userfaultfd.h"

namespace halite::uffd {

Result<int> Open() {
  auto u = engine::OpenUserfaultfd(/*shmem=*/false);
  if (!u) return u.error();
  return u->fd;
}

Status Register(int fd, void* addr, uint64_t len) {
  bool has_zeropage = false;
  return engine::UffdRegister(fd, addr, len, &has_zeropage);
}

Fill Copy(int fd, uint64_t dst, const void* src, uint64_t len, bool wake) {
  const engine::UffdFill f = engine::UffdCopy(fd, dst, src, len, wake);
  return Fill{f.done, f.err};
}

Fill ZeroPage(int fd, uint64_t dst, uint64_t len, bool wake) {
  const engine::UffdFill f = engine::UffdZeroPage(fd, dst, len, wake);
  return Fill{f.done, f.err};
}

int Wake(int fd, uint64_t dst, uint64_t len) { return engine::UffdWake(fd, dst, len); }

}  // namespace halite::uffd
