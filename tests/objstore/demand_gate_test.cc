// Demand reads first (objstore/demand_gate.h): no background request starts while a demand read is in flight or
// within the hold-off after one, at most the policy's number are in flight otherwise, pieces are no larger than
// the policy says, and background callers are served in the order they came. No test depends on how fast this
// machine is: the hold-off runs on a clock the test moves, and a test that releases a blocked caller first waits
// until the gate counts it blocked.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "objstore/demand_gate.h"

using namespace halite::objstore;
using namespace std::chrono_literals;

namespace {

// The clock of the hold-off tests: moved by hand.
std::atomic<int64_t> fake_now_us{0};
DemandGate::Clock::time_point FakeNow() {
  return DemandGate::Clock::time_point(std::chrono::microseconds(fake_now_us.load()));
}

// Until `gate` counts `n` callers blocked in Turn::Wait.
void UntilWaiting(const DemandGate& gate, unsigned n) {
  while (gate.waiting_callers() != n) std::this_thread::yield();
}

LanePolicy Policy(unsigned in_flight, uint64_t piece, std::chrono::microseconds hold_off) {
  LanePolicy p;
  p.background_in_flight = in_flight;
  p.background_piece = piece;
  p.hold_off = hold_off;
  return p;
}

}  // namespace

TEST_CASE("background requests start up to the limit, each at most a piece", "[objstore][demand_gate]") {
  DemandGate gate(Policy(2, 4096, 0us));
  DemandGate::Turn turn(gate);
  CHECK(turn.TryStart() == 4096);
  CHECK(turn.TryStart() == 4096);
  CHECK(turn.TryStart() == 0);  // two in flight
  turn.End();
  CHECK(turn.TryStart() == 4096);
  turn.End();
  turn.End();
  CHECK(gate.counters().background_requests == 3);
}

TEST_CASE("no background request starts while a demand read is in flight", "[objstore][demand_gate]") {
  DemandGate gate(Policy(4, 4096, 0us));
  DemandGate::Turn turn(gate);
  REQUIRE(turn.TryStart() == 4096);  // in flight before the demand read: it stays
  {
    DemandGate::Demand demand(gate, 0, 4096);
    CHECK(turn.TryStart() == 0);
    CHECK(turn.TryStart() == 0);
  }
  CHECK(turn.TryStart() == 4096);  // no hold-off: at once after it
  turn.End();
  turn.End();
  const auto c = gate.counters();
  CHECK(c.demand_reads == 1);
  CHECK(c.background_ahead_of_demand == 1);  // the request already in flight when it began
  CHECK(c.demand_reads_overtaking == 1);     // the caller still had requests to start
  CHECK(c.background_requests == 2);
}

TEST_CASE("background requests wait the hold-off after a demand read", "[objstore][demand_gate]") {
  DemandGate gate(Policy(4, 4096, 200ms), &FakeNow);
  DemandGate::Turn turn(gate);
  CHECK(turn.TryStart() == 4096);  // before any demand read: no hold-off
  turn.End();
  { DemandGate::Demand demand(gate, 0, 4096); }
  CHECK(turn.TryStart() == 0);
  CHECK_FALSE(gate.open());
  CHECK_FALSE(turn.Wait(0ns));  // nothing to wait for: it says it may not start
  fake_now_us += 199'999;
  CHECK(turn.TryStart() == 0);
  fake_now_us += 1;
  CHECK(gate.open());
  CHECK(turn.Wait(0ns));
  CHECK(turn.TryStart() == 4096);
  turn.End();
}

TEST_CASE("Wait returns once the hold-off has passed", "[objstore][demand_gate]") {
  DemandGate gate(Policy(4, 4096, 1ms));  // the real clock: nobody wakes the caller, the hold-off ending must
  DemandGate::Turn turn(gate);
  { DemandGate::Demand demand(gate, 0, 4096); }
  CHECK(turn.Wait(10min));
  CHECK(turn.TryStart() == 4096);
  turn.End();
}

TEST_CASE("with demand_first off the gate holds nothing", "[objstore][demand_gate]") {
  LanePolicy p = Policy(1, 4096, 10min);
  p.demand_first = false;
  DemandGate gate(p);
  DemandGate::Turn turn(gate);
  DemandGate::Demand demand(gate, 0, 4096);
  CHECK(turn.TryStart() == 4096);
  CHECK(turn.TryStart() == 4096);  // no limit either
  CHECK(gate.counters().background_ahead_of_demand == 0);
  turn.End();
  turn.End();
}

TEST_CASE("an earlier background caller is served first, then the next once it finished",
          "[objstore][demand_gate]") {
  DemandGate gate(Policy(1, 4096, 0us));
  DemandGate::Turn first(gate);
  DemandGate::Turn second(gate);
  CHECK(second.TryStart() == 0);  // `first` came earlier and still has requests
  REQUIRE(first.TryStart() == 4096);
  first.End();
  first.Finished();
  CHECK(second.TryStart() == 4096);
  second.End();
}

TEST_CASE("Wait wakes when a request ends or a demand read ends", "[objstore][demand_gate]") {
  DemandGate gate(Policy(1, 4096, 0us));
  DemandGate::Turn turn(gate);
  REQUIRE(turn.TryStart() == 4096);
  std::atomic<bool> woke{false};
  std::thread waiter([&] { woke = turn.Wait(10min); });
  UntilWaiting(gate, 1);
  turn.End();  // the slot is free: the waiter may start
  waiter.join();
  CHECK(woke);

  std::optional<DemandGate::Demand> demand;
  demand.emplace(gate, 0, 4096);
  woke = false;
  std::thread waiter2([&] { woke = turn.Wait(10min); });
  UntilWaiting(gate, 1);
  demand.reset();  // no hold-off: open at once
  waiter2.join();
  CHECK(woke);
  CHECK(turn.TryStart() == 4096);
  turn.End();
}

TEST_CASE("Wait wakes a later caller when the earlier one finishes", "[objstore][demand_gate]") {
  DemandGate gate(Policy(2, 4096, 0us));
  DemandGate::Turn first(gate);
  DemandGate::Turn second(gate);
  std::atomic<bool> woke{false};
  std::thread waiter([&] { woke = second.Wait(10min); });
  UntilWaiting(gate, 1);
  first.Finished();
  waiter.join();
  CHECK(woke);
  CHECK(second.TryStart() == 4096);
  second.End();
}

TEST_CASE("the gate of a server is shared while it is held", "[objstore][demand_gate]") {
  auto a = DemandGate::ForServer("test-server-a", Policy(3, 1024, 0us));
  auto b = DemandGate::ForServer("test-server-a", Policy(9, 9, 9us));
  CHECK(a.get() == b.get());
  CHECK(b->policy().background_in_flight == 3);
  auto other = DemandGate::ForServer("test-server-b", Policy(5, 1024, 0us));
  CHECK(other.get() != a.get());
}

TEST_CASE("a demand read on a background caller's path holds nothing", "[objstore][demand_gate]") {
  DemandGate gate(Policy(2, 4096, 10min));
  DemandGate::Turn turn(gate);
  turn.SetFrontier(1 << 20, 2 << 20);
  REQUIRE(turn.TryStart() == 4096);
  {
    DemandGate::Demand on_path(gate, (1 << 20) + 4096, 8192);  // inside the frontier
    CHECK(gate.open());
    CHECK(turn.TryStart() == 4096);
  }
  CHECK(gate.open());  // no hold-off after it either
  {
    DemandGate::Demand straddling(gate, (1 << 20) - 100, 200);  // overlaps its first bytes
    CHECK(gate.open());
  }
  {
    DemandGate::Demand elsewhere(gate, 3 << 20, 8192);
    CHECK_FALSE(gate.open());
  }
  CHECK_FALSE(gate.open());  // its hold-off
  const auto c = gate.counters();
  CHECK(c.demand_reads == 3);
  CHECK(c.demand_reads_on_path == 2);
  CHECK(c.background_ahead_of_demand == 2);  // only the read that held counts what was ahead of it
  turn.End();
  turn.End();
}

TEST_CASE("a caller's frontier goes with it", "[objstore][demand_gate]") {
  DemandGate gate(Policy(2, 4096, 10min));
  {
    DemandGate::Turn turn(gate);
    turn.SetFrontier(0, 1 << 20);
    turn.SetFrontier(0, 0);  // cleared
    DemandGate::Demand d(gate, 4096, 4096);
    CHECK_FALSE(gate.open());
  }
  DemandGate other(Policy(2, 4096, 0us));
  {
    DemandGate::Turn turn(other);
    turn.SetFrontier(0, 1 << 20);
  }
  DemandGate::Demand d(other, 4096, 4096);  // the caller is gone: its frontier too
  CHECK_FALSE(other.open());
}
