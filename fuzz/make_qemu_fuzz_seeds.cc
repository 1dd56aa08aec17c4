// hlt-fuzz-seeds-qemu OUTDIR: seeds for qemu_stream_fuzz (built when the QEMU integration and its sample streams
// exist): each sample stream with the mode bytes the target reads first (0: stream reader, whole input at once;
// 2/4: stream reader in small chunks; 1/3: return-path reader).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "qemu_test_streams.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hlt-fuzz-seeds-qemu OUTDIR\n");
    return 2;
  }
  namespace fs = std::filesystem;
  using namespace halite::qemu::testing;
  fs::path out = argv[1];
  std::error_code ec;
  fs::create_directories(out, ec);
  auto write = [&](const std::string& name, char mode, const std::string& body) {
    std::ofstream f(out / name, std::ios::binary | std::ios::trunc);
    f << mode << body;
    return bool(f);
  };
  bool ok = true;
  for (int i = 0; i < 8; ++i) {
    SampleStreamOptions o;
    o.with_vmdesc = i & 1;
    o.with_ram_end = i & 2;
    o.scan_jump = i & 4;
    o.capabilities_subsection = i == 5;
    ok &= write("stream" + std::to_string(i), char(i % 3 == 0 ? 0 : 2 * (i % 3)), BuildSampleStream(o));
  }
  ok &= write("return-path", 1, BuildSampleReturnPath());
  ok &= write("return-path-chunked", 3, BuildSampleReturnPath());
  if (!ok) {
    std::fprintf(stderr, "hlt-fuzz-seeds-qemu: cannot write to %s\n", out.c_str());
    return 1;
  }
  return 0;
}
