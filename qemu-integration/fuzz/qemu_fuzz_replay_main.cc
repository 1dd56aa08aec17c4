// Plain driver for qemu_stream_fuzz.cc under ctest: runs the target over the seed corpus (the hand-built sample
// streams, each with every parser mode) plus mutations of them, and over files named on the command line.
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../tests/qemu_test_streams.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Run(uint8_t mode, const std::string& body) {
  std::string input(1, static_cast<char>(mode));
  input += body;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace halite::qemu::testing;
  std::vector<std::string> streams;
  for (int i = 0; i < 8; ++i) {
    SampleStreamOptions o;
    o.with_vmdesc = i & 1;
    o.with_ram_end = i & 2;
    o.scan_jump = i & 4;
    o.capabilities_subsection = i == 5;
    streams.push_back(BuildSampleStream(o));
  }
  const std::string rp = BuildSampleReturnPath();
  size_t runs = 0;
  for (const auto& s : streams) {
    for (uint8_t mode : {0, 2, 4, 0x10}) Run(mode, s), ++runs;
    // Deterministic mutations of the structural bytes (first 300, last 200).
    uint32_t x = 12345;
    for (int k = 0; k < 300; ++k) {
      x = x * 1103515245 + 12345;
      std::string m = s;
      const size_t pos = (k % 2) ? (x >> 8) % 300 : s.size() - 1 - (x >> 8) % 200;
      m[pos] = static_cast<char>(x >> 24);
      Run(static_cast<uint8_t>(k % 32) & 0xfe, m);
      ++runs;
    }
  }
  for (size_t cut = 0; cut <= rp.size(); ++cut) {
    Run(1, rp.substr(0, cut));
    Run(3, rp.substr(0, cut));
    runs += 2;
  }
  for (int i = 1; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    ++runs;
  }
  printf("qemu_stream_fuzz_replay: %zu inputs, no crash\n", runs);
  return 0;
}
