// The engine's timeline: every fault and background block load, with its time, page, kind and latency.
// Appends take a short lock; faults number in the thousands per second at most, so the lock is not contended
// enough to matter (and recording is off unless asked for).
#ifndef HALITE_ENGINE_EVENT_TIMELINE_H_
#define HALITE_ENGINE_EVENT_TIMELINE_H_

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "halite/restore_engine.h"

namespace halite::engine {

class EventTimeline {
 public:
  EventTimeline(bool enabled, size_t capacity) : enabled_(enabled), capacity_(capacity) {}
  bool enabled() const { return enabled_; }
  void Add(const EngineEvent& e);
  std::vector<EngineEvent> Events() const;  // sorted by time
  uint64_t dropped() const;

 private:
  const bool enabled_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<EngineEvent> events_;
  uint64_t dropped_ = 0;
};

// CSV with header `time_us,region,page,kind,block,latency_us`; region by name.
std::string EventsToCsv(std::span<const EngineEvent> events, std::span<const Region> regions);

}  // namespace halite::engine

#endif  // HALITE_ENGINE_EVENT_TIMELINE_H_
