// Everything of a saved QEMU VM except its RAM pages: what a restore replays around the pages.
//
// MigrationStreamReader fills a SavedVmState from QEMU's outgoing stream; the restore side
// (MigrationStreamWriter, RunPostcopySource, RunPrecopySource) sends it back. A checkpoint stores it as one
// opaque blob (EncodeSavedVmState) next to the pages, which it stores as RAMBlock index + page index.
#ifndef HALITE_QEMU_QEMU_SAVED_STATE_H_
#define HALITE_QEMU_QEMU_SAVED_STATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "halite/qemu/qemu_stream_format.h"
#include "halite/status.h"

namespace halite::qemu {

// One guest RAMBlock as the RAM section's MEM_SIZE list announces it ("pc.ram", "/rom@etc/acpi/tables", ...).
struct RamBlockInfo {
  std::string name;
  uint64_t used_length = 0;  // bytes; a multiple of kTargetPageSize
  // Host page size backing the block (4096, or a huge page size). 0 = unknown: a precopy stream does not carry
  // it; `info ramblock` (QueryRamBlocks) does.
  uint64_t page_size = 0;
  // Only for `info ramblock` results: the block's maximum length (resizeable blocks may grow up to it).
  uint64_t max_length = 0;

  uint64_t page_count() const { return used_length / kTargetPageSize; }
  friend bool operator==(const RamBlockInfo&, const RamBlockInfo&) = default;
};

// A page of guest RAM: RAMBlock index (into SavedVmState::ram_blocks) and target-page index within it.
struct PageId {
  uint32_t block = 0;
  uint64_t page = 0;
  friend bool operator==(const PageId&, const PageId&) = default;
  friend auto operator<=>(const PageId&, const PageId&) = default;
};

struct SavedVmState {
  uint32_t stream_version = kStreamVersion;
  // The configuration record exactly as QEMU wrote it, tag byte 0x07 first (machine type + subsections).
  std::string configuration;
  std::string machine_type;  // e.g. "pc-i440fx-7.2", decoded from `configuration`
  // The RAM section's identity in the saved stream. A restore reuses the id: device sections in device_state
  // carry their own ids, and QEMU resolves PART/END sections by id.
  uint32_t ram_section_id = 0;
  uint32_t ram_instance_id = 0;
  uint32_t ram_version_id = kRamSectionVersion;
  std::vector<RamBlockInfo> ram_blocks;
  // Device state: every byte from the first device FULL section after the last RAM section up to, not
  // including, the EOF byte. Sent back unchanged.
  std::string device_state;
  // The VM description JSON that follows EOF (empty when the stream had none). An eager restore sends it back
  // because QEMU's loader reads it after EOF.
  std::string vmdesc;

  // Index of the block named `name`, or -1.
  int FindBlock(std::string_view name) const;
  uint64_t total_pages() const;
};

// Serializes a SavedVmState into a self-describing little-endian blob ("HQVS", version 1) for the checkpoint.
std::string EncodeSavedVmState(const SavedVmState& state);
// Parses EncodeSavedVmState's output; rejects truncation, trailing bytes and unknown versions (corrupt).
Result<SavedVmState> DecodeSavedVmState(std::string_view blob, std::string_view name = "qemu state");

// Checks that a destination's RAMBlocks (from QueryRamBlocks) can receive the saved ones: every saved block must
// exist with the same used length (a resizeable block may differ up to the destination's maximum). The error
// names the block and both sizes: "destination RAMBlock pc.ram is 0x8000000 bytes, the checkpoint's is
// 0x4000000: start QEMU with the same -m and memory devices" (invalid-argument).
Status CheckRamBlocksCompatible(const std::vector<RamBlockInfo>& saved, const std::vector<RamBlockInfo>& destination);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_SAVED_STATE_H_
