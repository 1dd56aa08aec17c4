// Whole-buffer pread/pwrite with EINTR handling and precise errors; the one place these loops live.
#ifndef HALITE_IO_POSIX_IO_H_
#define HALITE_IO_POSIX_IO_H_

#include <cstdint>
#include <span>
#include <string>

#include "halite/status.h"

namespace halite::io {

// Reads exactly buf.size() bytes at `offset`. kIoError names `name` and the offset; retryable for EIO, EAGAIN,
// ENOMEM and for a short read (the file ended early: it may have been changed under us).
Status PreadFull(int fd, std::span<uint8_t> buf, uint64_t offset, const std::string& name);
// Writes all of `data` at `offset`. kIoError names `name` and the offset.
Status PwriteFull(int fd, std::span<const uint8_t> data, uint64_t offset, const std::string& name);

}  // namespace halite::io

#endif  // HALITE_IO_POSIX_IO_H_
