// The receiving half of a lazy push restore: a thread that reads QEMU's return path, checks every message
// against the saved state, queues page requests for the request workers, and records SHUT, the PONG that says
// the guest is about to run, and the end of the return path, for whoever waits on them (ChannelHealth's lock).
#ifndef HALITE_QEMU_PUSH_RETURN_PATH_LISTENER_H_
#define HALITE_QEMU_PUSH_RETURN_PATH_LISTENER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "halite/qemu/qemu_saved_state.h"
#include "push/channel_health.h"
#include "push/request_workers.h"
#include "push/section_writer.h"

namespace halite::qemu::push {

class ReturnPathListener {
 public:
  // Borrows everything. `package_ping` is the PING value sent inside PACKAGED: its PONG means the destination
  // loaded the device state and runs the guest next. `listen_ping`'s PONG: guest RAM is registered with QEMU's
  // userfaultfd (the PING right after LISTEN).
  ReturnPathListener(int fd, const SavedVmState& state, ChannelHealth& health, const SectionWriter& stream,
                     RequestWorkers& workers, uint32_t package_ping, uint32_t listen_ping);
  ~ReturnPathListener() { Stop(); }

  void Start();
  // Stops reading (within ~50 ms) and joins the thread.
  void Stop();

  // With health.Lock() held.
  const std::optional<uint32_t>& shut_locked() const { return shut_; }
  bool ended_locked() const { return ended_; }
  const std::optional<std::chrono::steady_clock::time_point>& package_pong_locked() const { return package_pong_; }
  bool listen_pong_locked() const { return listen_pong_; }
  const std::vector<PageId>& requested_locked() const { return requested_; }
  // How many requests asked for each length in bytes (QEMU asks for one host page: 4 KiB, or 2 MiB for
  // hugetlbfs-backed RAM).
  const std::map<uint64_t, uint64_t>& request_sizes_locked() const { return request_sizes_; }
  // Postcopy recovery: the RECV_BITMAP of each block asked for (by block index; QEMU's bit order, one bit a
  // target page, little-endian 64-bit words), and RESUME_ACK's value once it came.
  const std::vector<std::optional<std::string>>& recv_bitmaps_locked() const { return recv_bitmaps_; }
  const std::optional<uint32_t>& resume_ack_locked() const { return resume_ack_; }
  uint64_t pages_sent_before_first_request_locked() const { return pages_sent_before_first_request_; }

  // Lock-free.
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  // Why the return path ended (ok: after SHUT 0, or on Stop()).
  Status WhyEnded(const Status& read_error, bool read_failed);

  const int fd_;
  const SavedVmState& state_;
  ChannelHealth& health_;
  const SectionWriter& stream_;
  RequestWorkers& workers_;
  const uint32_t package_ping_;
  const uint32_t listen_ping_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> requests_{0};
  // With health.Lock():
  std::optional<uint32_t> shut_;
  bool ended_ = false;
  std::optional<std::chrono::steady_clock::time_point> package_pong_;
  bool listen_pong_ = false;
  std::vector<PageId> requested_;  // each request's first page, in arrival order
  std::map<uint64_t, uint64_t> request_sizes_;
  uint64_t pages_sent_before_first_request_ = 0;
  std::vector<std::optional<std::string>> recv_bitmaps_;
  std::optional<uint32_t> resume_ack_;
};

}  // namespace halite::qemu::push

#endif  // HALITE_QEMU_PUSH_RETURN_PATH_LISTENER_H_
