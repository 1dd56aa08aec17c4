// The eager (precopy) source: the whole saved VM as one precopy stream, RAM first.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "halite/qemu/qemu_byte_io.h"
#include "halite/qemu/qemu_restore_source.h"
#include "halite/qemu/qemu_stream_writer.h"
#include "qemu_clock.h"

namespace halite::qemu {
namespace {

// Waits until the peer closes the channel (read returns 0 or fails), discarding anything it sends.
Status WaitForPeerClose(int fd, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      return Status::IoError("destination kept the channel open " + std::to_string(timeout_ms) +
                             " ms after the end of the stream");
    }
    pollfd pfd{fd, POLLIN, 0};
    const int pr = poll(&pfd, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return Status::IoError("poll", errno);
    if (pr == 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return Status::Ok();
  }
}

Status WriteAll(MigrationStreamWriter& w, const SavedVmState& state, RestorePageSource& pages,
                const PrecopyRestoreOptions& options, PrecopyRestoreStats* stats) {
  HLT_RETURN_IF_ERROR(w.WriteHeader());
  HLT_RETURN_IF_ERROR(w.WriteConfiguration());
  HLT_RETURN_IF_ERROR(w.WriteRamStart());
  uint8_t buf[kTargetPageSize];
  for (uint32_t b = 0; b < state.ram_blocks.size(); ++b) {
    const uint64_t n = state.ram_blocks[b].page_count();
    for (uint64_t p = 0; p < n; ++p) {
      if (!w.in_ram_section()) HLT_RETURN_IF_ERROR(w.BeginRamPart());
      bool zero = false;
      const PageId id{b, p};
      HLT_RETURN_IF_ERROR(pages.ReadPage(id, buf, &zero));
      // Zero pages are sent too: ROM blocks on the destination start with their own contents, not zeros.
      if (zero) {
        HLT_RETURN_IF_ERROR(w.WriteZeroPage(id));
        ++stats->zero_pages;
      } else {
        HLT_RETURN_IF_ERROR(w.WritePage(id, buf));
      }
      ++stats->pages;
      if (w.section_pages() >= options.section_pages) HLT_RETURN_IF_ERROR(w.EndRamSection());
    }
  }
  if (w.in_ram_section()) HLT_RETURN_IF_ERROR(w.EndRamSection());
  HLT_RETURN_IF_ERROR(w.WriteRamEnd());
  HLT_RETURN_IF_ERROR(w.WriteDeviceState());
  HLT_RETURN_IF_ERROR(w.WriteEof());
  HLT_RETURN_IF_ERROR(w.WriteVmdesc());
  return w.Flush();
}

}  // namespace

Status RunPrecopyRestore(int fd, const SavedVmState& state, RestorePageSource& pages,
                         const PrecopyRestoreOptions& options, PrecopyRestoreStats* stats) {
  PrecopyRestoreStats local;
  if (stats == nullptr) stats = &local;
  *stats = PrecopyRestoreStats{};
  const auto t0 = Clock::now();
  FdSink sink(fd, "restore stream", 1 << 20, options.stall_timeout_ms);
  MigrationStreamWriter w(&sink, &state);
  Status s = WriteAll(w, state, pages, options, stats);
  stats->bytes_sent = sink.bytes_written();
  stats->write_us = MicrosSince(t0);
  if (!s.ok()) {
    if (s.code() == StatusCode::kIoError) {
      return s.WithContext("destination stopped reading after " + std::to_string(stats->pages) + " of " +
                           std::to_string(w.total_pages()) + " pages (did QEMU reject the stream or exit?)");
    }
    return s;
  }
  // QEMU's loader reads one more byte after EOF looking for VMDESC and blocks there until it arrives or the
  // channel closes ("Expected vmdescription section, but got 0"); half-closing ends that wait in every case.
  shutdown(fd, SHUT_WR);
  s = WaitForPeerClose(fd, options.close_timeout_ms);
  stats->total_us = MicrosSince(t0);
  return s;
}

}  // namespace halite::qemu
