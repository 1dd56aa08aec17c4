// Pieces of the text summaries the tools print, shared by the library's report builders (trace replay, QEMU and
// libvirt restores) so that the tools, the C API and the bindings print the same thing.
#ifndef HALITE_STATS_TEXT_H_
#define HALITE_STATS_TEXT_H_

#include <cstdint>
#include <span>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/export.h"

namespace halite {

// "512 B", "1.50 KiB", ... "2.00 TiB" (powers of 1024, two decimals above bytes).
HALITE_EXPORT std::string HumanBytes(uint64_t bytes);
// Lower-case hex of `bytes` (file ids, fingerprints, uuids).
HALITE_EXPORT std::string HexBytes(std::span<const uint8_t> bytes);
// What a block cache did for a reader: "12 blocks from the block cache, 3 fetched (1.20 MiB)"; empty when the
// reader used no cache.
HALITE_EXPORT std::string BlockCacheSummary(const ReaderStats& stats);
// What a save wrote to `path`, as hlt-save prints it: "saved PATH", then pages, blocks, bytes, coding, ratio and
// time, a line each.
HALITE_EXPORT std::string WriteSummaryText(const WriteSummary& summary, const std::string& path);

}  // namespace halite

#endif  // HALITE_STATS_TEXT_H_
