#include "halite/qemu/qemu_saved_state.h"

#include <cstring>

#include <fmt/format.h>

#include "halite/bytes.h"

namespace halite::qemu {
namespace {

constexpr char kBlobMagic[4] = {'H', 'Q', 'V', 'S'};
constexpr uint32_t kBlobVersion = 1;
// Limits a decoder checks before allocating.
constexpr uint32_t kMaxBlocks = 4096;
constexpr uint64_t kMaxBlobString = 1ull << 32;

void PutStr(std::string* out, std::string_view s) {
  PutLe64(out, s.size());
  out->append(s);
}

// A u64 length, then that many bytes.
Result<std::string> ReadStr(ByteCursor& r, const std::string& what) {
  HLT_ASSIGN_OR_RETURN(uint64_t n, r.ReadLe64(what + " length"));
  if (n > kMaxBlobString || n > r.remaining()) {
    return r.Error(what + " length " + std::to_string(n) + " exceeds the remaining " + std::to_string(r.remaining()) +
                   " bytes");
  }
  return r.Str(n);
}

}  // namespace

int SavedVmState::FindBlock(std::string_view name) const {
  for (size_t i = 0; i < ram_blocks.size(); ++i) {
    if (ram_blocks[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

uint64_t SavedVmState::total_pages() const {
  uint64_t n = 0;
  for (const auto& b : ram_blocks) n += b.page_count();
  return n;
}

std::string EncodeSavedVmState(const SavedVmState& s) {
  std::string out(kBlobMagic, 4);
  PutLe32(&out, kBlobVersion);
  PutLe32(&out, s.stream_version);
  PutStr(&out, s.configuration);
  PutStr(&out, s.machine_type);
  PutLe32(&out, s.ram_section_id);
  PutLe32(&out, s.ram_instance_id);
  PutLe32(&out, s.ram_version_id);
  PutLe32(&out, static_cast<uint32_t>(s.ram_blocks.size()));
  for (const auto& b : s.ram_blocks) {
    PutStr(&out, b.name);
    PutLe64(&out, b.used_length);
    PutLe64(&out, b.page_size);
  }
  PutStr(&out, s.device_state);
  PutStr(&out, s.vmdesc);
  return out;
}

Result<SavedVmState> DecodeSavedVmState(std::string_view blob, std::string_view name) {
  ByteCursor r(blob, 0, name);
  if (blob.size() < 8 || memcmp(blob.data(), kBlobMagic, 4) != 0) return r.Error("bad magic (expected \"HQVS\")");
  HLT_ASSIGN_OR_RETURN(uint64_t magic, r.ReadLe32("magic"));
  (void)magic;
  HLT_ASSIGN_OR_RETURN(uint64_t version, r.ReadLe32("version"));
  if (version != kBlobVersion) {
    return Status::Unsupported(std::string(name) + ": version " + std::to_string(version) + " (this build reads " +
                               std::to_string(kBlobVersion) + ")");
  }
  SavedVmState s;
  HLT_ASSIGN_OR_RETURN(uint64_t sv, r.ReadLe32("stream version"));
  s.stream_version = static_cast<uint32_t>(sv);
  HLT_ASSIGN_OR_RETURN(s.configuration, ReadStr(r, "configuration"));
  HLT_ASSIGN_OR_RETURN(s.machine_type, ReadStr(r, "machine type"));
  HLT_ASSIGN_OR_RETURN(uint64_t id, r.ReadLe32("ram section id"));
  HLT_ASSIGN_OR_RETURN(uint64_t inst, r.ReadLe32("ram instance id"));
  HLT_ASSIGN_OR_RETURN(uint64_t ver, r.ReadLe32("ram version id"));
  s.ram_section_id = static_cast<uint32_t>(id);
  s.ram_instance_id = static_cast<uint32_t>(inst);
  s.ram_version_id = static_cast<uint32_t>(ver);
  HLT_ASSIGN_OR_RETURN(uint64_t nblocks, r.ReadLe32("block count"));
  if (nblocks > kMaxBlocks) return r.Error("block count " + std::to_string(nblocks) + " over the limit of 4096");
  for (uint64_t i = 0; i < nblocks; ++i) {
    RamBlockInfo b;
    HLT_ASSIGN_OR_RETURN(b.name, ReadStr(r, "block name"));
    HLT_ASSIGN_OR_RETURN(b.used_length, r.ReadLe64("block used length"));
    HLT_ASSIGN_OR_RETURN(b.page_size, r.ReadLe64("block page size"));
    if (b.used_length % kTargetPageSize != 0) {
      return r.Error("block " + b.name + " used length " + fmt::format("{:#x}", b.used_length) + " is not a multiple of 4096");
    }
    s.ram_blocks.push_back(std::move(b));
  }
  HLT_ASSIGN_OR_RETURN(s.device_state, ReadStr(r, "device state"));
  HLT_ASSIGN_OR_RETURN(s.vmdesc, ReadStr(r, "vmdesc"));
  if (r.remaining() != 0) return r.Error(std::to_string(blob.size() - r.pos()) + " trailing bytes");
  return s;
}

Status CheckRamBlocksCompatible(const std::vector<RamBlockInfo>& saved, const std::vector<RamBlockInfo>& dest) {
  for (const auto& b : saved) {
    const RamBlockInfo* d = nullptr;
    for (const auto& x : dest) {
      if (x.name == b.name) d = &x;
    }
    if (d == nullptr) {
      return Status::InvalidArgument("destination has no RAMBlock " + b.name + " (the checkpoint's is " +
                                     fmt::format("{:#x}", b.used_length) +
                                     " bytes): start QEMU with the same machine type, -m and memory devices");
    }
    // QEMU resizes a resizeable block (used < max) on load; any other size difference fails the load.
    const bool resizeable = d->max_length > d->used_length;
    const bool fits = resizeable ? b.used_length <= d->max_length : b.used_length == d->used_length;
    if (!fits) {
      return Status::InvalidArgument("destination RAMBlock " + b.name + " is " + fmt::format("{:#x}", d->used_length) +
                                     " bytes, the checkpoint's is " + fmt::format("{:#x}", b.used_length) +
                                     ": start QEMU with the same -m and memory devices");
    }
    if (b.page_size != 0 && d->page_size != 0 && b.page_size != d->page_size) {
      return Status::InvalidArgument("destination RAMBlock " + b.name + " uses " + fmt::format("{:#x}", d->page_size) +
                                     "-byte pages, the checkpoint's used " + fmt::format("{:#x}", b.page_size) +
                                     ": back guest memory the same way (hugepages or not)");
    }
  }
  return Status::Ok();
}

}  // namespace halite::qemu
