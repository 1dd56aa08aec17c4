#include "common/cli.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>


#include "halite/authentication.h"

namespace halite::cli {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kIoError: return kExitIo;
    case StatusCode::kCorrupt:
    case StatusCode::kUnsupported:
    case StatusCode::kAuthFailed: return kExitCorrupt;
    default: return kExitUsage;
  }
}

int Fail(const std::string& tool, const Status& s) {
  std::cerr << tool << ": " << s.ToString() << "\n";
  return ExitCodeFor(s);
}

int UsageError(const std::string& tool, const std::string& message, const std::string& usage) {
  std::cerr << tool << ": " << message << "\n" << usage;
  return kExitUsage;
}

Args::Args(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) args_.emplace_back(argv[i]);
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  std::string digits = s;
  uint64_t mult = 1;
  char last = digits.back();
  if (last == 'K' || last == 'k') mult = 1ull << 10;
  if (last == 'M' || last == 'm') mult = 1ull << 20;
  if (last == 'G' || last == 'g') mult = 1ull << 30;
  if (mult != 1) digits.pop_back();
  if (digits.empty()) return false;
  size_t pos = 0;
  unsigned long long v;
  try {
    v = std::stoull(digits, &pos, 0);
  } catch (...) {
    return false;
  }
  if (pos != digits.size() || digits[0] == '-') return false;
  if (v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

Progress::Progress(std::string label) : label_(std::move(label)), tty_(::isatty(2)) {}
Progress::~Progress() { Finish(); }

void Progress::Update(uint64_t done, uint64_t total) {
  if (!tty_) return;
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  if (done != total && now - last_ns_ < 100'000'000) return;
  last_ns_ = now;
  double pct = total ? 100.0 * double(done) / double(total) : 100.0;
  std::fprintf(stderr, "\r%s %5.1f%% (%llu/%llu)", label_.c_str(), pct, (unsigned long long)done,
               (unsigned long long)total);
  shown_ = true;
}

void Progress::Finish() {
  if (shown_) std::fprintf(stderr, "\r\033[K");
  shown_ = false;
}

std::string JsonText(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace halite::cli
