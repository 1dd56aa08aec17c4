// Plain driver for any fuzz target: runs LLVMFuzzerTestOneInput over every file named on the command line,
// descending into directories (sorted, so runs are repeatable). Built with the normal compiler and registered
// under ctest by tests/hardening/CMakeLists.txt, so every seed and every past crash input (fuzz/regressions/)
// is replayed in the normal suite and a fixed bug stays fixed.
//
// Exit: 0 when every input ran (a crash aborts with the input's path on stderr); 77 (skipped) when there was no
// input at all. Paths that do not exist are reported and skipped (an empty regressions directory is normal).
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

const char* g_current = nullptr;

// On a crash, say which input caused it (async-signal-safe: write(2) only), then let the signal kill us.
void OnCrash(int sig) {
  if (g_current) {
    const char* prefix = "\nfuzz replay: crashed on input ";
    (void)!::write(2, prefix, std::strlen(prefix));
    (void)!::write(2, g_current, std::strlen(g_current));
    (void)!::write(2, "\n", 1);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) std::signal(sig, OnCrash);
  namespace fs = std::filesystem;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        if (it->is_regular_file(ec)) found.push_back(it->path().string());
      }
      std::sort(found.begin(), found.end());
      inputs.insert(inputs.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p.string());
    } else {
      std::fprintf(stderr, "fuzz replay: %s: not found, skipped\n", argv[i]);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "fuzz replay: no inputs (skipped)\n");
    return 77;
  }
  size_t bytes = 0;
  for (const auto& path : inputs) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "fuzz replay: %s: cannot read\n", path.c_str());
      return 1;
    }
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    g_current = path.c_str();
    // Copy into an exactly sized buffer so a read past the end is caught by ASan, as under libFuzzer.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[data.size() ? data.size() : 1]);
    if (!data.empty()) std::memcpy(exact.get(), data.data(), data.size());
    LLVMFuzzerTestOneInput(exact.get(), data.size());
    bytes += data.size();
  }
  g_current = nullptr;
  std::printf("fuzz replay: %zu inputs (%zu bytes), no crash\n", inputs.size(), bytes);
  return 0;
}
