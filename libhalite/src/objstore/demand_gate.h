// Demand reads first (issue 28 item 7). The object-store backends have two kinds of reads: a demand read, one
// range someone is waiting for (RandomAccessFile::ReadAt: a fault's block), and background reads, batches that
// stream a checkpoint while nobody waits for them in particular (ReadBatch: the loader's and the preload's
// batches). Both go to the same server, whose queues a demand read cannot jump: radosgw sends every request's reads
// to the OSDs through its one RADOS client, an OSD serves one client's operations in order, and on a small host
// the server's CPU is shared by whatever is in flight. Measured before the gate: blocking faults of a lazy restore
// from s3:// at p50 2.3-4.3 ms and p99 22-41 ms with the loader streaming, 2.4 and 9 ms with it off
// (bench/objstore/fault_priority.py; bench/results/2026-11-27-fault-priority/README.md has the runs with the gate).
//
// The gate keeps background requests out of the way, per server and process:
//   - a demand read is sent at once, always;
//   - no background request starts while a demand read is in flight, nor within `hold_off` after one ended (a
//     guest that faults once usually faults again soon: the next fault then finds nothing ahead of it);
//   - otherwise at most `background_in_flight` background requests of at most `background_piece` bytes are in
//     flight at once: enough to keep the stream at its speed (it is decoded on one thread; a plain download
//     gains little from more), few and small enough that the first demand read after a quiet spell waits for
//     little;
//   - a demand read on the path of a background caller (inside the bytes it is fetching) holds nothing: the guest
//     is catching up with the stream - it reads memory in restore order - and the stream brings those bytes in
//     large requests anyway; holding it back would leave the guest fetching the rest block by block;
//   - background callers are served in the order they arrived (a ticket each), so the batch the loader needs
//     next is not overtaken by the one it fetches ahead.
// A background request already sent is never cancelled: its server-side work is done or queued by then.
//
// HALITE_DEMAND_GATE=off in the environment turns it off for the process (every gate created afterwards lets
// background requests go as before it: no hold, no limit, whole requests), so that a benchmark can compare the two in
// one run (bench/objstore/fault_priority.py).
//
// Thread-safe. Pure bookkeeping: no I/O (tests drive it directly, with a clock of their own).
#ifndef HALITE_OBJSTORE_DEMAND_GATE_H_
#define HALITE_OBJSTORE_DEMAND_GATE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace halite::objstore {

// Which kind of read a backend call is (see above).
enum class ReadLane { kDemand, kBackground };

struct LanePolicy {
  unsigned background_in_flight = 2;         // background requests in flight at most, all callers together
  uint64_t background_piece = 1u << 20;      // bytes one background request asks for at most
  std::chrono::microseconds hold_off{3000};  // after a demand read ends, background requests wait this long
  bool demand_first = true;                  // false: the gate holds nothing (HALITE_DEMAND_GATE=off)
};

// `policy` as HALITE_DEMAND_GATE leaves it: unchanged, or (=off) one that holds nothing.
LanePolicy PolicyFromEnv(const LanePolicy& policy);

class DemandGate {
 public:
  using Clock = std::chrono::steady_clock;

  using Now = Clock::time_point (*)();

  // `now` tells the time (the hold-off); tests pass a clock they move themselves.
  explicit DemandGate(LanePolicy policy, Now now = &Clock::now) : policy_(policy), now_(now) {}
  DemandGate(const DemandGate&) = delete;
  DemandGate& operator=(const DemandGate&) = delete;

  // The gate of one server (an endpoint URL, a cluster), shared by every file of this process that reads from
  // it: created with PolicyFromEnv(`policy`) by the first caller, the same gate afterwards while anyone holds it.
  static std::shared_ptr<DemandGate> ForServer(const std::string& server, const LanePolicy& policy);

  const LanePolicy& policy() const { return policy_; }

  // As far as demand reads go, background requests may start now: none is in flight, the hold-off has passed.
  bool open() const;

  // A demand read of bytes [offset, offset + length) in flight from construction until destruction. One inside
  // the frontier of a background caller (Turn::SetFrontier) is on its path and holds nothing.
  class Demand {
   public:
    Demand(DemandGate& gate, uint64_t offset, uint64_t length);
    ~Demand();
    Demand(const Demand&) = delete;
    Demand& operator=(const Demand&) = delete;

   private:
    DemandGate& gate_;
    bool holds_ = true;
  };

  // One background caller's place in the queue (one ReadBatch), from construction until destruction. Used by
  // one thread.
  class Turn {
   public:
    explicit Turn(DemandGate& gate);
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

    // When a request of this caller may start now: counts it in flight and returns the most bytes it may ask for
    // (End() when it ends, whatever its outcome; or DemandGate::EndBackground() where the Turn is out of reach).
    // 0: not now (a demand read is in flight or recent, the slots are taken, or an earlier caller is waiting).
    uint64_t TryStart();
    void End();
    // This caller will start no more requests: later callers need not wait for it.
    void Finished();
    // The bytes this caller is fetching, [begin, end): demand reads there are on its path. Empty: none.
    void SetFrontier(uint64_t begin, uint64_t end);
    // Blocks until a TryStart() may succeed (a demand read or a request ended, the hold-off passed) or
    // `max_wait` passed: true in the first case.
    bool Wait(std::chrono::nanoseconds max_wait);

   private:
    DemandGate& gate_;
    uint64_t ticket_;
    bool queued_ = true;
  };

  // A background request of some Turn ended where its Turn is out of reach (a completion callback): as Turn::End.
  void EndBackground();

  struct Counters {
    uint64_t demand_reads = 0;
    // Demand reads on a background caller's path (they held nothing).
    uint64_t demand_reads_on_path = 0;
    uint64_t background_requests = 0;
    // Per demand read that held, the background requests in flight when it began, summed: what it may have
    // queued behind.
    uint64_t background_ahead_of_demand = 0;
    // Demand reads that held while a background caller still had requests to start (held for them).
    uint64_t demand_reads_overtaking = 0;
  };
  Counters counters() const;
  // Background callers blocked in Turn::Wait now (tests wait for a caller to be blocked before they release it).
  unsigned waiting_callers() const;

 private:
  bool OpenLocked(Clock::time_point now) const;
  bool MayStartLocked(uint64_t ticket, Clock::time_point now) const;

  const LanePolicy policy_;
  const Now now_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  unsigned demand_in_flight_ = 0;  // demand reads that hold
  unsigned background_in_flight_ = 0;
  unsigned waiting_callers_ = 0;
  Clock::time_point last_demand_end_{};
  bool any_demand_ = false;
  uint64_t next_ticket_ = 0;
  std::set<uint64_t> waiting_;                                   // tickets of callers with requests to start
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> frontiers_;  // by ticket: [begin, end)
  Counters counters_;
};

}  // namespace halite::objstore

#endif  // HALITE_OBJSTORE_DEMAND_GATE_H_
