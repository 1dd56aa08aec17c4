// Writing a checkpoint's memory back out as a flat image (hlt-restore raw).
#ifndef HALITE_RAW_EXPORT_H_
#define HALITE_RAW_EXPORT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "halite/export.h"
#include "halite/checkpoint_reader.h"
#include "halite/status.h"

namespace halite {

struct HALITE_EXPORT RawExportOptions {
  unsigned threads = 0;  // 0 = one per CPU
  bool sync = true;
  std::function<void(uint64_t blocks_done, uint64_t blocks_total)> progress;  // from the calling thread
};

// Writes every region, in region order, one after another (page g at offset g*4096) to `path`. Zero and absent
// pages become holes (read back as zeros). The output appears under `path` only when complete and synced; on
// any error nothing is left behind. Errors: those of ReadBlock, and kIoError for the output.
HALITE_EXPORT Status ExportRawImage(const CheckpointReader& reader, const std::string& path, const RawExportOptions& options = {});

}  // namespace halite

#endif  // HALITE_RAW_EXPORT_H_
