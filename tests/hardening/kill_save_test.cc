// Crash-safe save: SIGKILLs `hlt-save raw` at random moments spread over a save and checks, after each kill, that
// the output name holds nothing or the complete previous file (byte-identical), and that nothing else appeared
// in the output directory (no temporary ".NAME.hlt-tmp.*", no staging file, nothing).
//
//   hardening_kill_save_test HLT_SAVE [--kills N] [--no-tmpfile SHIM]
//       --kills N           at least N kills (default 60), and at least min(N, 50) landing during a save
//       --no-tmpfile SHIM   run hlt-save with LD_PRELOAD=SHIM, which makes open(O_TMPFILE) fail with EOPNOTSUPP as
//                           on a file system without O_TMPFILE, so the sink's fallback (a temporary name renamed
//                           into place) is what gets killed. A kill then may leave ".NAME.hlt-tmp.PID.*" of the
//                           dead process (nothing can prevent that); it must be the only extra file, and the next
//                           save of NAME must remove it.
//   HALITE_KILL_SEED=N repeats a run's kill moments.
//
// A save that finished before its kill must have left a complete checkpoint (checked with the reader).
// Exit 0 on success, 1 on a violation, 77 (skipped) when the tool cannot run here.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"

namespace {

using halite::testing::ListDirectory;
using halite::testing::ReadWholeFile;

using Clock = std::chrono::steady_clock;

std::string g_preload;  // --no-tmpfile: the shim hlt-save runs with

pid_t StartSave(const std::string& tool, const std::string& image, const std::string& out) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    if (!g_preload.empty()) {
      ::setenv("LD_PRELOAD", g_preload.c_str(), 1);
      // A sanitized hlt-save wants its runtime first in the library list; the shim needs nothing from it.
      std::string asan = "verify_asan_link_order=0";
      if (const char* o = std::getenv("ASAN_OPTIONS")) asan = std::string(o) + ":" + asan;
      ::setenv("ASAN_OPTIONS", asan.c_str(), 1);
    }
    ::execl(tool.c_str(), tool.c_str(), "raw", image.c_str(), "-o", out.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Runs one save to completion; returns its duration in seconds, or a negative value when it failed.
double TimedSave(const std::string& tool, const std::string& image, const std::string& out) {
  auto t0 = Clock::now();
  pid_t pid = StartSave(tool, image, out);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool Verifies(const std::string& path) {
  auto r = halite::CheckpointReader::Open(path);
  return r.has_value() && (*r)->VerifyAll().ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s HLT_SAVE [--kills N] [--no-tmpfile SHIM]\n", argv[0]);
    return 2;
  }
  const std::string tool = argv[1];
  int kills = 60;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string opt = argv[i];
    if (opt == "--kills") {
      kills = std::atoi(argv[i + 1]);
    } else if (opt == "--no-tmpfile") {
      g_preload = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown option %s\n", opt.c_str());
      return 2;
    }
  }
  const bool fallback = !g_preload.empty();
  if (::access(tool.c_str(), X_OK) != 0) {
    std::printf("skipped: %s is not executable\n", tool.c_str());
    return 77;
  }
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("HALITE_KILL_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::mt19937_64 rng(seed);

  halite::testing::TempDir root;
  const std::string img_dir = root.File("image"), out_dir = root.File("out");
  ::mkdir(img_dir.c_str(), 0755);
  ::mkdir(out_dir.c_str(), 0755);
  const std::string image = img_dir + "/ram.img", out = out_dir + "/ckpt.hlt", previous = root.File("previous.hlt");

  // The image: 64 MiB, or 32 MiB when a save is slow here (sanitizer builds), so the run stays near a minute.
  double duration = -1;
  for (uint64_t mib : {64, 32}) {
    if (!halite::testing::WriteSyntheticImage(image, mib << 20, 99).ok()) {
      std::printf("FAIL: cannot write the %llu MiB image\n", static_cast<unsigned long long>(mib));
      return 1;
    }
    // The faster of two runs (the first warms the cache), so kills rarely land after the end.
    double first = TimedSave(tool, image, out);
    duration = TimedSave(tool, image, out);
    if (first < 0 || duration < 0) {
      std::printf("FAIL: a plain save of the image failed\n");
      return 1;
    }
    duration = std::min(first, duration);
    if (duration < 1.2) break;
  }
  if (!Verifies(out) || ::rename(out.c_str(), previous.c_str()) != 0) {
    std::printf("FAIL: the reference save does not verify\n");
    return 1;
  }
  const std::vector<uint8_t> previous_bytes = ReadWholeFile(previous);
  std::printf("kill-during-save%s: seed %llu, a save takes %.3f s, previous checkpoint %zu bytes\n",
              fallback ? " (no O_TMPFILE: temporary-name fallback)" : "", static_cast<unsigned long long>(seed),
              duration, previous_bytes.size());

  int killed = 0, finished = 0, with_previous = 0, failures = 0;
  std::vector<pid_t> dead_pids;
  std::set<std::string> temps_left;
  // Kills are spread over [0, upper). A machine that gets faster after the timing runs (another job ended) would
  // send most of them after the end: a save that finished before its kill lowers `upper` to that delay, and each
  // kill that lands lets it drift back up a little.
  double upper = duration * 1.05;
  // At least `kills` kills, and more (up to four times as many) until 50 have landed during a save.
  const int need_during = std::min(50, kills);
  for (int i = 0; i < kills || (killed < need_during && i < 4 * kills); ++i) {
    std::uniform_real_distribution<double> when(0.0, upper);
    const bool prev = i % 2 == 1;
    if (prev) {
      // A hard link: the save must replace the name, never write into the existing file.
      if (::link(previous.c_str(), out.c_str()) != 0) {
        std::printf("FAIL: cannot place the previous checkpoint\n");
        return 1;
      }
      ++with_previous;
    }
    const double delay = when(rng);
    pid_t pid = StartSave(tool, image, out);
    if (pid < 0) {
      std::printf("FAIL: fork\n");
      return 1;
    }
    struct timespec ts = {time_t(delay), long((delay - double(time_t(delay))) * 1e9)};
    ::nanosleep(&ts, nullptr);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const bool was_killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const bool completed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    auto names = ListDirectory(out_dir);
    if (fallback) {
      // Temporary names of killed saves (this one, or earlier ones not yet cleaned because this save died
      // before reaching its cleanup) are the one thing the fallback may leave; set them aside (a completed save
      // must remove them, checked at the end) and judge the rest.
      dead_pids.push_back(pid);
      auto it = std::remove_if(names.begin(), names.end(), [&](const std::string& n) {
        for (pid_t dead : dead_pids) {
          if (n.rfind(".ckpt.hlt.hlt-tmp." + std::to_string(dead) + ".", 0) == 0) return true;
        }
        return false;
      });
      temps_left.insert(it, names.end());
      names.erase(it, names.end());
    }
    std::string problem;
    if (!was_killed && !completed) {
      problem = "hlt-save failed on its own (status " + std::to_string(status) + ")";
    } else if (names.size() > 1 || (names.size() == 1 && names[0] != "ckpt.hlt")) {
      problem = "stray files:";
      for (auto& n : names) problem += " " + n;
    } else if (completed) {
      if (names.empty() || !Verifies(out)) problem = "a completed save left no valid checkpoint";
    } else if (prev) {
      if (names.empty()) {
        problem = "the previous checkpoint vanished";
      } else if (ReadWholeFile(out) != previous_bytes) {
        bool complete_new = Verifies(out);  // the kill came after the rename: a complete new file is fine too
        if (!complete_new) problem = "the output name holds neither the previous file nor a complete new one";
      }
    } else if (!names.empty() && !Verifies(out)) {
      problem = "a half-written checkpoint under the output name";
    }
    if (was_killed) ++killed;
    if (completed) ++finished;
    upper = completed ? std::max(0.01, std::min(upper, delay)) : std::min(duration * 1.05, upper * 1.02);
    if (!problem.empty()) {
      ++failures;
      std::printf("FAIL: kill %d at %.3f s (%s previous file): %s\n", i, delay, prev ? "with" : "without",
                  problem.c_str());
    }
    // Keep the fallback's leftovers; remove the rest for the next round.
    for (auto& n : names) ::unlink((out_dir + "/" + n).c_str());
  }
  if (fallback) {
    // The next save of the name removes what dead saves left behind.
    if (TimedSave(tool, image, out) < 0 || ListDirectory(out_dir) != std::vector<std::string>{"ckpt.hlt"}) {
      ++failures;
      std::printf("FAIL: after a completed save the directory holds:");
      for (auto& n : ListDirectory(out_dir)) std::printf(" %s", n.c_str());
      std::printf("\n");
    }
    std::printf("kill-during-save: %zu temporary files left by killed saves, all removed by the next save\n",
                temps_left.size());
  }
  std::printf("kill-during-save: %d kills (%d with a previous checkpoint under the output name): %d landed during "
              "the save, %d after it finished; %d violations\n",
              killed + finished, with_previous, killed, finished, failures);
  if (failures > 0) return 1;
  if (killed < need_during) {
    std::printf("FAIL: only %d kills landed during a save (need %d)\n", killed, need_during);
    return 1;
  }
  return 0;
}
