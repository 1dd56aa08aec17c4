// One RAM section of a push restore (halite/qemu/qemu_push_source.h): a RAM PART section holding pages of any
// RAMBlocks. It holds the migration stream for the thread that opened it until Close() or its destruction, so
// that no way out of a section (an error, an exception, an early return) can leave the stream locked. Its header
// goes out with its first page; a section without pages writes nothing.
//
// Pages are never sent twice: AddPages / AddZeroPages test-and-set each page's bit before a byte is written, and
// fail with an internal error (QEMU would pause the migration on "File exists").
//
// A RAMBlock whose host pages are larger than 4 KiB (hugetlbfs: RamBlockInfo::page_size) is sent a whole host page
// at a time: QEMU 7.2 gathers the records of one host page and places it when it has as many as the host page
// holds, from one channel, with no record of another page in between ("Non-same host page detected"). So in a
// section, the records of such a block start at a host page's first page, follow each other page after page, and
// a host page once begun ends before any other page and before the section closes; zero pages go as ZERO records
// like any other (never left out). A run that breaks this fails with an internal error before it is written; a
// section closed inside a host page fails the channel.
#ifndef HALITE_QEMU_QEMU_RAM_SECTION_H_
#define HALITE_QEMU_QEMU_RAM_SECTION_H_

#include <cstdint>
#include <mutex>

#include "halite/qemu/qemu_saved_state.h"
#include "halite/status.h"

namespace halite::qemu {

namespace push {
class SectionWriter;
}

// Who a section is for, which decides how it is counted and whether it waits for the destination to read.
enum class SectionKind {
  kPreload,         // placed before the guest starts
  kRequestAnswer,   // answers a page request (or is on its path): never waits
  kBackgroundPush,  // anything else once the guest runs: waits while too many sent pages are unread
};

class RamSection {
 public:
  RamSection(const RamSection&) = delete;
  RamSection& operator=(const RamSection&) = delete;
  // Closes the section if it is still open. A failure then fails the channel (every later call returns it);
  // call Close() to see it here.
  ~RamSection();

  // `count` pages of block first.block from page first.page; `data` holds count * 4096 bytes.
  Status AddPages(PageId first, uint64_t count, const uint8_t* data);
  Status AddZeroPages(PageId first, uint64_t count);
  // Ends the section, flushes it to the destination and releases the stream. Further calls fail.
  Status Close();

  SectionKind kind() const { return kind_; }
  uint64_t pages() const { return pages_; }

 private:
  friend class push::SectionWriter;
  RamSection(push::SectionWriter* writer, std::unique_lock<std::mutex> lock, SectionKind kind)
      : writer_(writer), lock_(std::move(lock)), kind_(kind) {}
  Status BeforeAdd(PageId first, uint64_t count);

  // The host-page rule above: checks a run before it is written, and follows the host page it leaves open.
  Status CheckHostPages(PageId first, uint64_t count);

  push::SectionWriter* writer_;
  std::unique_lock<std::mutex> lock_;  // the stream; released by Close()
  SectionKind kind_;
  // The host page the records so far have begun and not finished: its block and the page it needs next.
  uint32_t open_block_ = UINT32_MAX;
  uint64_t open_next_ = 0;
  bool header_written_ = false;
  uint64_t pages_ = 0;
  uint64_t zero_pages_ = 0;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RAM_SECTION_H_
