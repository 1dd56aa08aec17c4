// Finding a domain's process by its command line: one match is the answer, several are an error, never a guess.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "qemu_process_lookup.h"

using namespace halite::libvirt;

namespace {

// A child `sh -c 'read x' MARKER` (its /proc/PID/cmdline ends in MARKER) blocked in the shell's own `read` on a
// pipe: no grandchild outlives it to hold the test's output open.
struct Marked {
  pid_t pid = -1;
  int hold = -1;  // the pipe's write end: the child's read returns once it is closed
};

Marked StartMarked(const std::string& marker) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[0], 0);
    close(fds[0]);
    close(fds[1]);
    execl("/bin/sh", "sh", "-c", "read x", marker.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[0]);
  return Marked{pid, fds[1]};
}

void Stop(const Marked& m) {
  kill(m.pid, SIGKILL);
  waitpid(m.pid, nullptr, 0);
  close(m.hold);
}

bool HasMarker(const std::vector<std::string>& args, const std::string& marker) {
  return args.size() == 4 && args[0] == "sh" && args[3] == marker;
}

// After fork the child's cmdline is the parent's until it has exec'd: wait until `n` children show the marker.
void WaitForMarked(const std::string& marker, size_t n) {
  for (int i = 0; i < 500; ++i) {
    auto pid = FindProcessByArguments([&](const auto& a) { return HasMarker(a, marker); }, marker);
    if (n == 1 ? pid.has_value() : (!pid && pid.error().code() == halite::StatusCode::kInvalidArgument)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

TEST_CASE("the one process with the arguments is found; none is kNotFound") {
  const std::string marker = "hlt-lookup-test-one-" + std::to_string(getpid());
  auto none = FindProcessByArguments([&](const auto& a) { return HasMarker(a, marker); }, marker);
  REQUIRE(!none.has_value());
  CHECK(none.error().code() == halite::StatusCode::kNotFound);
  const Marked child = StartMarked(marker);
  REQUIRE(child.pid > 0);
  WaitForMarked(marker, 1);
  auto found = FindProcessByArguments([&](const auto& a) { return HasMarker(a, marker); }, marker);
  Stop(child);
  REQUIRE(found.has_value());
  CHECK(*found == child.pid);
}

TEST_CASE("two processes with the same arguments (two domains with one UUID) are an error naming both") {
  const std::string marker = "hlt-lookup-test-two-" + std::to_string(getpid());
  const Marked a = StartMarked(marker);
  const Marked b = StartMarked(marker);
  REQUIRE(a.pid > 0);
  REQUIRE(b.pid > 0);
  WaitForMarked(marker, 2);
  auto found = FindProcessByArguments([&](const auto& args) { return HasMarker(args, marker); }, marker);
  Stop(a);
  Stop(b);
  REQUIRE(!found.has_value());
  CHECK(found.error().code() == halite::StatusCode::kInvalidArgument);
  const std::string& m = found.error().message();
  CHECK(m.find(std::to_string(a.pid)) != std::string::npos);
  CHECK(m.find(std::to_string(b.pid)) != std::string::npos);
  CHECK(m.find(marker) != std::string::npos);
}
