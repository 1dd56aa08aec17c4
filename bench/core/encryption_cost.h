// bench_core --encryption: what encrypting a checkpoint costs (issue 26, format-spec 13), against the same
// checkpoint unencrypted in the same run: save throughput, an eager restore (every block read, verified,
// decrypted, decompressed), a lazy restore through the engine and userfaultfd, the time to a faulting page's
// frame, and the AEADs alone.
#ifndef HALITE_BENCH_CORE_ENCRYPTION_COST_H_
#define HALITE_BENCH_CORE_ENCRYPTION_COST_H_

#include <cstdint>
#include <string>
#include <vector>

namespace halite::bench {

struct CostRow {
  std::string table, config;
  double value1 = 0, value2 = 0, value3 = 0, value4 = 0;
};

// `image` holds `mem` (one region "ram"); checkpoints go to `dir`. Variants run interleaved, `runs` times each;
// medians are printed. Returns the rows for CSV/JSON.
std::vector<CostRow> RunEncryptionCost(const std::string& image, const std::vector<uint8_t>& mem,
                                       const std::string& dir, int runs);

}  // namespace halite::bench

#endif  // HALITE_BENCH_CORE_ENCRYPTION_COST_H_
