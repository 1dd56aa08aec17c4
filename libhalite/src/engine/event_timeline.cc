#include "engine/event_timeline.h"

#include <algorithm>
#include <cstdio>

namespace halite::engine {

void EventTimeline::Add(const EngineEvent& e) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  events_.push_back(e);
}

std::vector<EngineEvent> EventTimeline::Events() const {
  std::vector<EngineEvent> v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    v = events_;
  }
  // Events are appended when they finish, so a long block load may land after faults that began later.
  std::stable_sort(v.begin(), v.end(),
                   [](const EngineEvent& a, const EngineEvent& b) { return a.time_ns < b.time_ns; });
  return v;
}

uint64_t EventTimeline::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

std::string EventsToCsv(std::span<const EngineEvent> events, std::span<const Region> regions) {
  // Region names are printable ASCII and may contain commas or quotes: quote them, doubling quotes.
  std::vector<std::string> quoted;
  for (const auto& r : regions) {
    std::string q = "\"";
    for (char c : r.name) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    quoted.push_back(q + "\"");
  }
  std::string out = "time_us,region,page,kind,block,latency_us\n";
  char tail[160];
  for (const auto& e : events) {
    out += std::to_string(e.time_ns / 1000) + "." + std::to_string(1000 + e.time_ns % 1000).substr(1) + ",";
    out += e.page.region < quoted.size() ? quoted[e.page.region] : std::string("\"?\"");
    char block[16] = "";
    if (e.block != UINT32_MAX) std::snprintf(block, sizeof block, "%u", e.block);
    std::snprintf(tail, sizeof tail, ",%llu,%s,%s,%.3f\n", (unsigned long long)e.page.page, EngineEventKindName(e.kind),
                  block, double(e.latency_ns) / 1e3);
    out += tail;
  }
  return out;
}

}  // namespace halite::engine
