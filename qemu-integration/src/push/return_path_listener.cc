#include "push/return_path_listener.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "halite/byte_streams.h"
#include "halite/qemu/qemu_return_path.h"

namespace halite::qemu::push {

ReturnPathListener::ReturnPathListener(int fd, const SavedVmState& state, ChannelHealth& health,
                                       const SectionWriter& stream, RequestWorkers& workers, uint32_t package_ping, uint32_t listen_ping)
    : fd_(fd),
      state_(state),
      health_(health),
      stream_(stream),
      workers_(workers),
      package_ping_(package_ping),
      listen_ping_(listen_ping) {}

void ReturnPathListener::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ReturnPathListener::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();  // its reads poll the stop flag
}

Status ReturnPathListener::WhyEnded(const Status& read_error, bool read_failed) {
  const std::string progress = fmt::format("after {} of {} pages", stream_.pages_sent(), stream_.total_pages());
  if (shut_) return Status::Aborted(fmt::format("destination reported a failed load (SHUT {}) {}", *shut_, progress));
  std::string m = "destination closed the connection " + progress + " (did QEMU exit?)";
  if (read_failed) {
    m += ": " + read_error.message();
    if (read_error.sys_errno() != 0) m += std::string(" (") + std::strerror(read_error.sys_errno()) + ")";
  }
  return Status::IoError(m);
}

void ReturnPathListener::Loop() {
  FdSource source(fd_, FdSourceOptions{"return path", 0, 0, &stop_});
  // QEMU sizes a RECV_BITMAP by the block it names: anything larger than the checkpoint's largest is refused
  // before it is allocated.
  ReturnPathReader reader(&source, "return path", MaxRecvBitmapBytes(state_.ram_blocks));
  for (;;) {
    auto msg = reader.Next();
    if (!msg.has_value() || !msg->has_value()) {
      Status why;
      {
        auto lock = health_.Lock();
        ended_ = true;
        health_.NotifyAll();
        if (stop_ || (shut_ && *shut_ == 0)) return;
        why = WhyEnded(msg.has_value() ? Status::Ok() : msg.error(), !msg.has_value());
      }
      health_.Fail(why);
      return;
    }
    const ReturnPathMessage& m = **msg;
    Status bad;
    {
      auto lock = health_.Lock();
      switch (m.type) {
        case ReturnPathType::kReqPages:
        case ReturnPathType::kReqPagesId: {
          const int block = state_.FindBlock(m.block_name);
          const uint64_t pages = block < 0 ? 0 : state_.ram_blocks[block].page_count();
          const uint64_t first = m.offset / kTargetPageSize;
          const uint64_t count = std::max<uint64_t>(1, (m.length + kTargetPageSize - 1) / kTargetPageSize);
          if (block < 0) {
            bad = Status::Corrupt("return path: page request for unknown RAMBlock '" + m.block_name + "'");
          } else if (m.offset % kTargetPageSize != 0 || first >= pages || count > pages - first) {
            bad = Status::Corrupt(fmt::format("return path: page request {:#x}+{:#x} outside RAMBlock {} ({:#x} bytes)",
                                              m.offset, m.length, m.block_name, pages * kTargetPageSize));
          } else {
            if (requests_.fetch_add(1, std::memory_order_relaxed) == 0) {
              pages_sent_before_first_request_ = stream_.pages_sent();
            }
            requested_.push_back(PageId{static_cast<uint32_t>(block), first});
            ++request_sizes_[m.length];
            workers_.EnqueueLocked(
                PageRequest{static_cast<uint32_t>(block), first, count, std::chrono::steady_clock::now()});
          }
          break;
        }
        case ReturnPathType::kPong:
          if (m.value == package_ping_) package_pong_ = std::chrono::steady_clock::now();
          if (m.value == listen_ping_) listen_pong_ = true;
          break;
        case ReturnPathType::kShut:
          shut_ = m.value;
          break;
        case ReturnPathType::kRecvBitmap: {
          // Only in answer to our RECV_BITMAP command (a resumed restore), once per block, sized like the block.
          const int block = state_.FindBlock(m.block_name);
          const uint64_t words = block < 0 ? 0 : (state_.ram_blocks[block].page_count() + 63) / 64;
          if (block < 0) {
            bad = Status::Corrupt("return path: RECV_BITMAP for unknown RAMBlock '" + m.block_name + "'");
          } else if (m.bitmap.size() != words * 8) {
            bad = Status::Corrupt(fmt::format("return path: RECV_BITMAP of RAMBlock {} has {} bytes, expected {}",
                                              m.block_name, m.bitmap.size(), words * 8));
          } else {
            if (recv_bitmaps_.size() < state_.ram_blocks.size()) recv_bitmaps_.resize(state_.ram_blocks.size());
            recv_bitmaps_[block] = m.bitmap;
          }
          break;
        }
        case ReturnPathType::kResumeAck:
          resume_ack_ = m.value;
          break;
        default:
          bad = Status::Corrupt("return path: unexpected " +
                                std::string(ReturnPathTypeName(static_cast<uint16_t>(m.type))) + " message");
      }
      health_.NotifyAll();
    }
    if (!bad.ok()) {
      health_.Fail(bad);
      return;
    }
  }
}

}  // namespace halite::qemu::push
