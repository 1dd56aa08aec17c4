// fragmented-guest: writes a generated fragmented guest (tests/support/fragmented_guest.h) for the tool-level
// tests and for people who want to try hlt-save/hlt-restore replay on one.
//
//   fragmented-guest DIR [--pages N] [--seed S] [--active N] [--hot F] [--new F] [--overlap F]
//                                                 writes DIR/image, save.trace, va.hints, restore.trace
//   fragmented-guest probe                        exit 0 when userfaultfd works here, 77 (saying why) when not
//   fragmented-guest vm OUT.hlt                   a small QEMU-like checkpoint: three regions (one with a colon in
//                                                 its name and absent pages), two blobs, metadata; for relayout tests
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "halite/checkpoint_writer.h"
#include "halite/lazy_memory.h"
#include "support/fragmented_guest.h"
#include "support/synthetic_memory.h"

namespace {

int WriteVm(const std::string& path) {
  using namespace halite;
  WriterOptions o;
  o.block_pages = 16;
  o.sink.sync = false;
  o.metadata.vmm_kind = VmmKind::kQemu;
  o.metadata.machine_type = "pc-i440fx-7.2";
  o.metadata.creator = "fragmented-guest vm";
  o.metadata.created_unix_ns = 1700000000123456789ull;
  for (int i = 0; i < 16; ++i) o.metadata.vm_uuid[size_t(i)] = uint8_t(0xa0 + i);
  auto w = CheckpointWriter::Create(path, o);
  if (!w) return 3;
  struct Spec {
    const char* name;
    uint64_t base, pages;
  } specs[] = {{"pc.ram", 0, 8192}, {"vga.vram", 0xfd000000, 1024}, {"0000:00:02.0/rom", 0xfebc0000, 16}};
  for (uint32_t r = 0; r < 3; ++r) {
    auto idx = (*w)->AddRegion(specs[r].name, specs[r].base, specs[r].pages * 4096);
    if (!idx) return 3;
    auto bytes = halite::testing::SyntheticBytes(specs[r].pages * 4096, 100 + r);
    for (uint64_t p = 0; p < specs[r].pages; ++p) {
      if (r == 2 && p % 3 == 0) continue;  // absent pages stay absent through a relayout
      if (!(*w)->PutPage(r, p, std::span<const uint8_t>(bytes).subspan(p * 4096, 4096)).ok()) return 3;
    }
  }
  std::vector<uint8_t> blob1(100000, 7), blob2 = {1, 2, 3};
  if (!(*w)->AddBlob("qemu:device-state", blob1).ok() || !(*w)->AddBlob("qemu:vmdesc", blob2).ok()) return 3;
  auto sum = (*w)->Finish();
  if (!sum) {
    std::fprintf(stderr, "fragmented-guest vm: %s\n", sum.error().ToString().c_str());
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "probe") == 0) {
    std::string mode;
    halite::Status s = halite::LazyMemory::Probe(&mode);
    if (!s.ok()) {
      std::fprintf(stderr, "*** SKIPPED: userfaultfd unavailable: %s\n", s.ToString().c_str());
      return 77;
    }
    std::printf("userfaultfd: %s\n", mode.c_str());
    return 0;
  }
  if (argc >= 3 && std::strcmp(argv[1], "vm") == 0) return WriteVm(argv[2]);
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: fragmented-guest DIR [--pages N] [--seed S] [--active N] [--hot F] [--new F] [--overlap F]\n"
                 "       fragmented-guest probe\n");
    return 2;
  }
  halite::testing::FragmentedGuestOptions o;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--pages") == 0) {
      o.pages = std::strtoull(argv[i + 1], nullptr, 0);
    } else if (std::strcmp(argv[i], "--seed") == 0) {
      o.seed = std::strtoull(argv[i + 1], nullptr, 0);
    } else if (std::strcmp(argv[i], "--active") == 0) {
      o.active_processes = uint32_t(std::strtoul(argv[i + 1], nullptr, 0));
    } else if (std::strcmp(argv[i], "--hot") == 0) {
      o.hot_fraction = std::strtod(argv[i + 1], nullptr);
    } else if (std::strcmp(argv[i], "--new") == 0) {
      o.restore_new_fraction = std::strtod(argv[i + 1], nullptr);
    } else if (std::strcmp(argv[i], "--overlap") == 0) {
      o.restore_overlap = std::strtod(argv[i + 1], nullptr);
    } else {
      std::fprintf(stderr, "fragmented-guest: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  auto g = halite::testing::GenerateFragmentedGuest(o);
  halite::Status s = g.WriteFiles(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "fragmented-guest: %s\n", s.ToString().c_str());
    return 3;
  }
  std::printf("%s\n", g.Describe().c_str());
  return 0;
}
