#include "objstore/demand_gate.h"

#include <cstdlib>
#include <cstring>
#include <limits>

namespace halite::objstore {

LanePolicy PolicyFromEnv(const LanePolicy& policy) {
  const char* v = std::getenv("HALITE_DEMAND_GATE");
  if (v == nullptr || std::strcmp(v, "off") != 0) return policy;
  LanePolicy off;
  off.background_in_flight = std::numeric_limits<unsigned>::max();
  off.background_piece = std::numeric_limits<uint64_t>::max();
  off.hold_off = std::chrono::microseconds(0);
  off.demand_first = false;
  return off;
}

std::shared_ptr<DemandGate> DemandGate::ForServer(const std::string& server, const LanePolicy& policy) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<DemandGate>> gates;
  std::lock_guard<std::mutex> lock(mu);
  std::weak_ptr<DemandGate>& slot = gates[server];
  if (auto gate = slot.lock()) return gate;
  auto gate = std::make_shared<DemandGate>(PolicyFromEnv(policy));
  slot = gate;
  return gate;
}

bool DemandGate::OpenLocked(Clock::time_point now) const {
  if (demand_in_flight_ > 0) return false;
  return !any_demand_ || now - last_demand_end_ >= policy_.hold_off;
}

bool DemandGate::MayStartLocked(uint64_t ticket, Clock::time_point now) const {
  if (!policy_.demand_first) return true;
  return *waiting_.begin() == ticket && background_in_flight_ < policy_.background_in_flight && OpenLocked(now);
}

bool DemandGate::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return OpenLocked(now_());
}

unsigned DemandGate::waiting_callers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_callers_;
}

DemandGate::Counters DemandGate::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void DemandGate::EndBackground() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --background_in_flight_;
  }
  cv_.notify_all();
}

DemandGate::Demand::Demand(DemandGate& gate, uint64_t offset, uint64_t length) : gate_(gate) {
  std::lock_guard<std::mutex> lock(gate_.mu_);
  ++gate_.counters_.demand_reads;
  if (!gate_.policy_.demand_first) {
    holds_ = false;
    return;
  }
  for (const auto& [ticket, f] : gate_.frontiers_) {
    if (offset < f.second && f.first < offset + length) holds_ = false;
  }
  if (!holds_) {
    ++gate_.counters_.demand_reads_on_path;
    return;
  }
  ++gate_.demand_in_flight_;
  gate_.counters_.background_ahead_of_demand += gate_.background_in_flight_;
  if (!gate_.waiting_.empty()) ++gate_.counters_.demand_reads_overtaking;
}

DemandGate::Demand::~Demand() {
  if (!holds_) return;
  {
    std::lock_guard<std::mutex> lock(gate_.mu_);
    --gate_.demand_in_flight_;
    gate_.any_demand_ = true;
    gate_.last_demand_end_ = gate_.now_();
  }
  gate_.cv_.notify_all();
}

DemandGate::Turn::Turn(DemandGate& gate) : gate_(gate) {
  std::lock_guard<std::mutex> lock(gate_.mu_);
  ticket_ = gate_.next_ticket_++;
  gate_.waiting_.insert(ticket_);
}

DemandGate::Turn::~Turn() {
  Finished();
  std::lock_guard<std::mutex> lock(gate_.mu_);
  gate_.frontiers_.erase(ticket_);
}

void DemandGate::Turn::Finished() {
  if (!queued_) return;
  queued_ = false;
  {
    std::lock_guard<std::mutex> lock(gate_.mu_);
    gate_.waiting_.erase(ticket_);
  }
  gate_.cv_.notify_all();
}

void DemandGate::Turn::SetFrontier(uint64_t begin, uint64_t end) {
  std::lock_guard<std::mutex> lock(gate_.mu_);
  if (begin >= end) {
    gate_.frontiers_.erase(ticket_);
  } else {
    gate_.frontiers_[ticket_] = {begin, end};
  }
}

uint64_t DemandGate::Turn::TryStart() {
  std::lock_guard<std::mutex> lock(gate_.mu_);
  if (!queued_ || !gate_.MayStartLocked(ticket_, gate_.now_())) return 0;
  ++gate_.background_in_flight_;
  ++gate_.counters_.background_requests;
  return gate_.policy_.background_piece;
}

void DemandGate::Turn::End() { gate_.EndBackground(); }

bool DemandGate::Turn::Wait(std::chrono::nanoseconds max_wait) {
  std::unique_lock<std::mutex> lock(gate_.mu_);
  const auto deadline = gate_.now_() + max_wait;
  ++gate_.waiting_callers_;
  // The hold-off passing wakes nobody: wait in steps no longer than the time until it does.
  bool may = false;
  for (;;) {
    const auto now = gate_.now_();
    may = queued_ && gate_.MayStartLocked(ticket_, now);
    if (may || !queued_ || now >= deadline) break;
    auto until = deadline;
    if (gate_.demand_in_flight_ == 0 && gate_.any_demand_) {
      const auto open_at = gate_.last_demand_end_ + gate_.policy_.hold_off;
      if (open_at > now && open_at < until) until = open_at;
    }
    // A duration, not a time point: the gate's clock need not be the condition variable's.
    gate_.cv_.wait_for(lock, until - now);
  }
  --gate_.waiting_callers_;
  return may;
}

}  // namespace halite::objstore
