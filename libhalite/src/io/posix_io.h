// Whole-buffer pread/pwrite, and whole-buffer writes to a stream, with EINTR handling and precise errors; the one
// place these loops live.
#ifndef HALITE_IO_POSIX_IO_H_
#define HALITE_IO_POSIX_IO_H_

#include <cstdint>
#include <cstddef>
#include <span>
#include <string>

#include "halite/status.h"

namespace halite::io {

// Reads exactly buf.size() bytes at `offset`. kIoError names `name` and the offset; retryable for EIO, EAGAIN,
// ENOMEM and for a short read (the file ended early: it may have been changed under us).
Status PreadFull(int fd, std::span<uint8_t> buf, uint64_t offset, const std::string& name);
// Writes all of `data` at `offset`. kIoError names `name` and the offset.
Status PwriteFull(int fd, std::span<const uint8_t> data, uint64_t offset, const std::string& name);

// Writes all of `data` to a stream fd (a pipe, socket, FIFO, or a file at its position). A socket is written with
// MSG_NOSIGNAL | MSG_DONTWAIT (a peer that died is EPIPE, not SIGPIPE). stall_timeout_ms > 0: fails when no byte
// goes out for that long. Errors (kIoError) name `name` and the stream offset of the byte that failed
// (`offset` is the stream offset of data[0]); *written (optional) gets the bytes that did go out.
Status WriteStreamFull(int fd, bool is_socket, std::span<const uint8_t> data, const std::string& name, uint64_t offset,
                       int stall_timeout_ms, uint64_t* written = nullptr);

}  // namespace halite::io

#endif  // HALITE_IO_POSIX_IO_H_
