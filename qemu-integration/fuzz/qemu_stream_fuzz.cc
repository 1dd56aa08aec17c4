// libFuzzer target: MigrationStreamReader and ReturnPathReader over arbitrary bytes from memory.
// The first byte picks the parser and the read chunk size, so record boundaries also fall between reads.
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <span>

#include "halite/qemu/qemu_return_path.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/qemu/qemu_stream_reader.h"

namespace {

class CheckingHandler : public halite::qemu::MigrationStreamHandler {
 public:
  halite::Status OnPage(const halite::qemu::PageRecord& r) override {
    // Touch the delivered bytes so sanitizers see any out-of-bounds pointer.
    if (!r.is_zero) sum_ += r.data[0] + r.data[halite::qemu::kTargetPageSize - 1];
    if (r.offset >= r.block->used_length) __builtin_trap();
    return halite::Status::Ok();
  }
  unsigned sum_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::span<const uint8_t> body(data + 1, size - 1);
  const size_t chunk = (mode & 0x0e) == 0 ? SIZE_MAX : (mode & 0x0e) * 37;
  halite::MemorySource src(body, chunk);
  if (mode & 1) {
    halite::qemu::ReturnPathReader reader(&src, "return path", 1 << 20);
    for (int i = 0; i < 100000; ++i) {
      auto m = reader.Next();
      if (!m.has_value() || !m->has_value()) break;
    }
  } else {
    CheckingHandler handler;
    halite::qemu::MigrationStreamReaderOptions opts;
    opts.max_device_state = 1 << 20;
    // The default RAM limit (8 TiB) lets a stream cost a 256 MiB page bitmap: allowed, but it would slow every
    // run that finds it. The check is the same at any limit.
    opts.max_ram_bytes = uint64_t{1} << 36;
    opts.require_vmdesc = (mode & 0x10) == 0;
    halite::qemu::MigrationStreamReader reader(&src, &handler, opts);
    if (reader.Run().ok()) {
      // A stream that parses must survive the checkpoint round trip of its non-RAM state.
      const std::string blob = halite::qemu::EncodeSavedVmState(reader.state());
      auto back = halite::qemu::DecodeSavedVmState(blob);
      if (!back.has_value() || halite::qemu::EncodeSavedVmState(*back) != blob) __builtin_trap();
    }
    (void)reader.MissingPages(16);
  }
  return 0;
}
