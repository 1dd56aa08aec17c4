// RekeySummaryText (moved here from tools/hlt-save/key_modes.cc, unchanged).
#include <fmt/printf.h>

#include "halite/checkpoint_rekey.h"

namespace halite {

std::string RekeySummaryText(const std::string& input, const std::string& output, const RekeySummary& summary) {
  return fmt::sprintf("rekeyed %s -> %s\n", input, output) +
         fmt::sprintf("  blocks %llu, blobs %llu, %llu bytes, %.3f s (nothing recompressed)\n",
                      (unsigned long long)summary.blocks, (unsigned long long)summary.blobs,
                      (unsigned long long)summary.file_bytes, summary.seconds) +
         fmt::sprintf("  encrypted        %s, key id %s\n", CipherName(summary.cipher), KeyIdHex(summary.key_id));
}

}  // namespace halite
