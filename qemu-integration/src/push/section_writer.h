// The sending half of a push restore channel: the migration stream, written by one thread at a time, and the
// record of which pages went out. Control records (header, PACKAGED, EOF) go through WriteRecords; pages go
// through RamSections (halite/qemu/qemu_ram_section.h), each holding the stream until it closes.
#ifndef HALITE_QEMU_PUSH_SECTION_WRITER_H_
#define HALITE_QEMU_PUSH_SECTION_WRITER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "halite/byte_streams.h"
#include "halite/qemu/qemu_ram_section.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/qemu/qemu_stream_writer.h"
#include "halite/status.h"

namespace halite::qemu::push {

// Pages sent, by the kind of section that carried them.
struct SectionCounts {
  uint64_t preload_pages = 0;
  uint64_t request_pages = 0;
  uint64_t pushed_pages = 0;
  uint64_t zero_pages = 0;  // of all sent, as ZERO records
  uint64_t sections = 0;
  uint64_t bytes_sent = 0;
};

class SectionWriter {
 public:
  // Borrows `fd` and `state`. `on_write_error` turns a failed write into the channel's error (explaining it
  // from the return path when it can) and returns that error; every write error passes through it.
  SectionWriter(int fd, const SavedVmState& state, bool lazy, int stall_timeout_ms,
                std::function<Status(const Status&)> on_write_error);

  // Writes records that are not pages with the stream held, then flushes. `write` gets the stream writer. With
  // end_of_stream the stream is over once `write` ran: no section opens afterwards.
  Status WriteRecords(const std::function<Status(MigrationStreamWriter&)>& write, bool end_of_stream = false);

  // Takes the stream for the calling thread, waiting while another thread holds it. Errors: kInternal when this
  // thread holds a section already (it would wait for itself), kAborted when the stream has ended.
  Result<std::unique_ptr<RamSection>> Open(SectionKind kind);

  // Lock-free.
  bool IsSent(PageId page) const;
  uint64_t pages_sent() const { return pages_sent_.load(std::memory_order_relaxed); }
  uint64_t total_pages() const { return total_pages_; }
  // 4 KiB pages per host page of `block` (1 unless it is backed by larger pages, like hugetlbfs).
  uint64_t PagesPerHostPage(uint32_t block) const {
    const uint64_t size = block < state_.ram_blocks.size() ? state_.ram_blocks[block].page_size : 0;
    return size > kTargetPageSize ? size / kTargetPageSize : 1;
  }
  bool ended() const { return ended_.load(std::memory_order_acquire); }
  // Answers to page requests waiting for the stream right now (tests wait for one to queue instead of sleeping).
  int answers_waiting() const { return answers_waiting_.load(std::memory_order_acquire); }

  // From now on no page of a block marked in `direct` may go into the stream (its pages are placed in QEMU's
  // memory directly): a section adding one fails with kInternal before writing it. Call once, while no section
  // holds such a page.
  void RefuseBlocks(const std::vector<bool>& direct);
  bool IsRefused(uint32_t block) const {
    return block < refused_.size() && refused_[block].load(std::memory_order_acquire);
  }

  // A resumed restore: the pages the destination says it holds already (its RECV_BITMAP for `block`: one bit a
  // page, little-endian 64-bit words) count as sent, so that none goes again. Call before any section opens.
  // Returns how many pages that marked.
  uint64_t MarkReceived(uint32_t block, const std::string& bitmap);
  uint64_t pages_received_before() const { return pages_received_before_; }

  // Pages in sections the destination has not read yet (the socket's unsent bytes, SIOCOUTQ); 0 when the fd is
  // not a socket (no way to tell).
  uint64_t UnreadPages();
  SectionCounts counts() const;

 private:
  friend class halite::qemu::RamSection;
  // Checks the range and test-and-sets each page's bit; kInternal for a page sent before (nothing is written).
  Status MarkSent(PageId first, uint64_t count);
  // A section ended: count it and remember where it ends in the stream. With the stream held.
  void SectionFlushed(SectionKind kind, uint64_t pages, uint64_t zero_pages);
  void Release() { owner_.store(std::thread::id(), std::memory_order_release); }

  const SavedVmState& state_;
  const int fd_;
  std::function<Status(const Status&)> on_write_error_;

  mutable std::mutex stream_mu_;  // held by a RamSection or WriteRecords
  // Preempt-style priority on the one stream: an answer to a page request waiting for the stream goes before any
  // background push that waits too (a push that finds one waiting steps back on `stream_free_` until it is gone).
  std::atomic<int> answers_waiting_{0};
  std::condition_variable stream_free_;  // with stream_mu_: notified whenever the stream is released
  std::atomic<std::thread::id> owner_{};
  FdSink sink_;
  MigrationStreamWriter writer_;
  SectionCounts counts_;  // with stream_mu_
  std::atomic<bool> ended_{false};

  std::vector<std::unique_ptr<std::atomic<uint64_t>[]>> sent_;  // per block, one bit a page
  std::atomic<uint64_t> pages_sent_{0};
  std::vector<std::atomic<bool>> refused_;  // per block: placed directly, never in the stream
  uint64_t total_pages_ = 0;
  uint64_t pages_received_before_ = 0;  // MarkReceived, before any section

  // Sections flushed but maybe not read by the destination yet: (stream bytes at the section's end, pages).
  std::mutex unread_mu_;
  std::deque<std::pair<uint64_t, uint64_t>> unread_;
  uint64_t unread_pages_ = 0;
  std::atomic<uint64_t> bytes_flushed_{0};
};

}  // namespace halite::qemu::push

#endif  // HALITE_QEMU_PUSH_SECTION_WRITER_H_
