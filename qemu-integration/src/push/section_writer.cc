#include "push/section_writer.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace halite::qemu::push {

SectionWriter::SectionWriter(int fd, const SavedVmState& state, bool lazy, int stall_timeout_ms,
                             std::function<Status(const Status&)> on_write_error)
    : state_(state),
      fd_(fd),
      on_write_error_(std::move(on_write_error)),
      sink_(fd, FdSinkOptions{"restore stream", 256 * 1024, stall_timeout_ms}),
      writer_(&sink_, &state, MigrationStreamWriterOptions{lazy, kTargetPageSize}),
      refused_(state.ram_blocks.size()) {
  for (const auto& b : state_.ram_blocks) {
    const uint64_t words = (b.page_count() + 63) / 64;
    sent_.emplace_back(new std::atomic<uint64_t>[words]);
    for (uint64_t i = 0; i < words; ++i) sent_.back()[i].store(0, std::memory_order_relaxed);
    total_pages_ += b.page_count();
  }
}

Status SectionWriter::WriteRecords(const std::function<Status(MigrationStreamWriter&)>& write, bool end_of_stream) {
  Status s;
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    if (ended()) return Status::Aborted("restore channel: the stream has already ended");
    if (end_of_stream) ended_.store(true, std::memory_order_release);
    s = write(writer_);
    if (s.ok()) s = writer_.Flush();
    bytes_flushed_.store(sink_.bytes_written(), std::memory_order_release);
  }
  stream_free_.notify_all();
  // A record too large for QEMU (PACKAGED over 16 MiB): refused before a byte went out; the channel is healthy.
  if (s.code() == StatusCode::kInvalidArgument) return s;
  return s.ok() ? s : on_write_error_(s);
}

Result<std::unique_ptr<RamSection>> SectionWriter::Open(SectionKind kind) {
  if (owner_.load(std::memory_order_acquire) == std::this_thread::get_id()) {
    return Status::Internal("restore channel: a section opened inside another section of the same thread");
  }
  const bool answer = kind == SectionKind::kRequestAnswer;
  if (answer) answers_waiting_.fetch_add(1, std::memory_order_acq_rel);
  std::unique_lock<std::mutex> lock(stream_mu_);
  if (answer) {
    answers_waiting_.fetch_sub(1, std::memory_order_acq_rel);
  } else {
    // A guest thread waits on every requested page; a push can wait (QEMU's postcopy-preempt idea, on our side).
    stream_free_.wait(lock, [&] { return answers_waiting_.load(std::memory_order_acquire) == 0 || ended(); });
  }
  if (ended()) return Status::Aborted("restore channel: the stream has already ended");
  owner_.store(std::this_thread::get_id(), std::memory_order_release);
  return std::unique_ptr<RamSection>(new RamSection(this, std::move(lock), kind));
}

bool SectionWriter::IsSent(PageId page) const {
  if (page.block >= sent_.size() || page.page >= state_.ram_blocks[page.block].page_count()) return false;
  return (sent_[page.block][page.page / 64].load(std::memory_order_acquire) >> (page.page % 64)) & 1;
}

Status SectionWriter::MarkSent(PageId first, uint64_t count) {
  if (first.block >= state_.ram_blocks.size() || count > state_.ram_blocks[first.block].page_count() ||
      first.page > state_.ram_blocks[first.block].page_count() - count) {
    return Status::Internal(fmt::format("restore channel: pages {}+{} are outside block {}", first.page, count,
                                        first.block));
  }
  // A page of a block placed through QEMU's userfaultfd would be placed twice (EEXIST fails QEMU's load), or
  // overwrite the direct copy's content with QEMU's own ordering: never.
  if (IsRefused(first.block)) {
    return Status::Internal(fmt::format("restore channel: page {} of RAMBlock {} is placed directly in QEMU's "
                                        "memory: it must never travel in the migration stream too",
                                        first.page, state_.ram_blocks[first.block].name));
  }
  // Never a page twice: QEMU would pause the migration on "File exists". Checked before any byte is written.
  for (uint64_t p = first.page; p < first.page + count; ++p) {
    const uint64_t bit = uint64_t{1} << (p % 64);
    if (sent_[first.block][p / 64].fetch_or(bit, std::memory_order_acq_rel) & bit) {
      return Status::Internal(fmt::format("restore channel: page {} of RAMBlock {} sent twice", p,
                                          state_.ram_blocks[first.block].name));
    }
  }
  pages_sent_.fetch_add(count, std::memory_order_relaxed);
  return Status::Ok();
}

uint64_t SectionWriter::MarkReceived(uint32_t block, const std::string& bitmap) {
  if (block >= state_.ram_blocks.size()) return 0;
  const uint64_t pages = state_.ram_blocks[block].page_count();
  uint64_t marked = 0;
  for (uint64_t p = 0; p < pages && p / 8 < bitmap.size(); ++p) {
    // Bit p of little-endian 64-bit words is bit p % 8 of byte p / 8.
    if (!((uint8_t(bitmap[p / 8]) >> (p % 8)) & 1)) continue;
    const uint64_t bit = uint64_t{1} << (p % 64);
    if (!(sent_[block][p / 64].fetch_or(bit, std::memory_order_acq_rel) & bit)) ++marked;
  }
  pages_received_before_ += marked;
  return marked;
}

void SectionWriter::RefuseBlocks(const std::vector<bool>& direct) {
  for (size_t b = 0; b < direct.size() && b < refused_.size(); ++b) {
    if (direct[b]) refused_[b].store(true, std::memory_order_release);
  }
}

void SectionWriter::SectionFlushed(SectionKind kind, uint64_t pages, uint64_t zero_pages) {
  const uint64_t bytes = sink_.bytes_written();
  bytes_flushed_.store(bytes, std::memory_order_release);
  ++counts_.sections;
  counts_.zero_pages += zero_pages;
  switch (kind) {
    case SectionKind::kPreload:
      counts_.preload_pages += pages;
      break;
    case SectionKind::kRequestAnswer:
      counts_.request_pages += pages;
      break;
    case SectionKind::kBackgroundPush:
      counts_.pushed_pages += pages;
      break;
  }
  std::lock_guard<std::mutex> lock(unread_mu_);
  unread_.emplace_back(bytes, pages);
  unread_pages_ += pages;
}

uint64_t SectionWriter::UnreadPages() {
  int outq = 0;
  if (ioctl(fd_, SIOCOUTQ, &outq) != 0) return 0;
  const uint64_t flushed = bytes_flushed_.load(std::memory_order_acquire);
  const uint64_t consumed = flushed - std::min<uint64_t>(flushed, static_cast<uint64_t>(outq));
  std::lock_guard<std::mutex> lock(unread_mu_);
  while (!unread_.empty() && unread_.front().first <= consumed) {
    unread_pages_ -= unread_.front().second;
    unread_.pop_front();
  }
  return unread_pages_;
}

SectionCounts SectionWriter::counts() const {
  std::lock_guard<std::mutex> lock(stream_mu_);
  SectionCounts out = counts_;
  out.bytes_sent = sink_.bytes_written();
  return out;
}

}  // namespace halite::qemu::push

namespace halite::qemu {

RamSection::~RamSection() {
  if (lock_.owns_lock()) (void)Close();
}

Status RamSection::CheckHostPages(PageId first, uint64_t count) {
  const auto& blocks = writer_->state_.ram_blocks;
  auto name = [&](uint32_t b) { return b < blocks.size() ? blocks[b].name : std::to_string(b); };
  if (open_block_ != UINT32_MAX && (first.block != open_block_ || first.page != open_next_)) {
    const uint64_t unit = writer_->PagesPerHostPage(open_block_);
    return Status::Internal(fmt::format(
        "restore channel: page {} of RAMBlock {} would go inside the {} KiB host page at page {} of RAMBlock {}, "
        "which needs page {} next (QEMU places a host page only from consecutive records of all of its pages)",
        first.page, name(first.block), unit * 4, open_next_ / unit * unit, name(open_block_), open_next_));
  }
  const uint64_t unit = writer_->PagesPerHostPage(first.block);
  if (unit == 1 || count == 0) return Status::Ok();
  if (open_block_ == UINT32_MAX && first.page % unit != 0) {
    return Status::Internal(fmt::format("restore channel: pages {}+{} of RAMBlock {} begin inside a {} KiB host page "
                                        "(its first page is {}): QEMU would place that host page incomplete",
                                        first.page, count, name(first.block), unit * 4, first.page / unit * unit));
  }
  const uint64_t end = first.page + count;
  open_block_ = end % unit == 0 ? UINT32_MAX : first.block;
  open_next_ = end;
  return Status::Ok();
}

Status RamSection::BeforeAdd(PageId first, uint64_t count) {
  if (!lock_.owns_lock()) return Status::Internal("restore channel: pages added to a closed section");
  // Before MarkSent: a run refused here was never sent.
  HLT_RETURN_IF_ERROR(CheckHostPages(first, count));
  HLT_RETURN_IF_ERROR(writer_->MarkSent(first, count));
  pages_ += count;
  if (header_written_) return Status::Ok();
  header_written_ = true;
  Status s = writer_->writer_.BeginRamPart();
  return s.ok() ? s : writer_->on_write_error_(s);
}

Status RamSection::AddPages(PageId first, uint64_t count, const uint8_t* data) {
  HLT_RETURN_IF_ERROR(BeforeAdd(first, count));
  Status s;
  for (uint64_t i = 0; i < count && s.ok(); ++i) {
    s = writer_->writer_.WritePage(PageId{first.block, first.page + i}, data + i * kTargetPageSize);
  }
  return s.ok() ? s : writer_->on_write_error_(s);
}

Status RamSection::AddZeroPages(PageId first, uint64_t count) {
  HLT_RETURN_IF_ERROR(BeforeAdd(first, count));
  Status s;
  for (uint64_t i = 0; i < count && s.ok(); ++i) s = writer_->writer_.WriteZeroPage(PageId{first.block, first.page + i});
  if (!s.ok()) return writer_->on_write_error_(s);
  zero_pages_ += count;
  return Status::Ok();
}

Status RamSection::Close() {
  if (!lock_.owns_lock()) return Status::Internal("restore channel: a section closed twice");
  Status s;
  if (open_block_ != UINT32_MAX) {
    // The destination holds part of a host page it can never complete in order: fail the channel (QEMU pauses
    // with the host page unplaced) rather than send anything else.
    const uint64_t unit = writer_->PagesPerHostPage(open_block_);
    s = Status::Internal(fmt::format("restore channel: a section ended inside the {} KiB host page at page {} of "
                                     "RAMBlock {} (page {} was next)",
                                     unit * 4, open_next_ / unit * unit, writer_->state_.ram_blocks[open_block_].name,
                                     open_next_));
    writer_->Release();
    lock_.unlock();
    writer_->stream_free_.notify_all();
    return writer_->on_write_error_(s);
  }
  if (header_written_) {
    s = writer_->writer_.EndRamSection();
    if (s.ok()) s = writer_->writer_.Flush();
    if (s.ok()) writer_->SectionFlushed(kind_, pages_, zero_pages_);
  }
  writer_->Release();
  lock_.unlock();
  writer_->stream_free_.notify_all();
  return s.ok() ? s : writer_->on_write_error_(s);
}

}  // namespace halite::qemu
