// What this machine can do at best, measured directly, so the engine's per-fault costs have something to be
// compared with: a userfaultfd round trip, UFFDIO_COPY per page, and the per-block steps (read, verify,
// decompress, install) timed one by one.
#ifndef HALITE_BENCH_ENGINE_MACHINE_LIMITS_H_
#define HALITE_BENCH_ENGINE_MACHINE_LIMITS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace halite::bench {

struct UffdCosts {
  double fault_copy_us = 0;  // a thread touches a missing page; a handler answers with UFFDIO_COPY of that page
  double fault_zero_us = 0;  // ... with UFFDIO_ZEROPAGE
  std::vector<std::pair<uint32_t, double>> copy_us_per_page;  // UFFDIO_COPY of runs of N pages, no waiter
};
UffdCosts MeasureUffd(uint64_t faults);

struct BlockCosts {
  uint64_t blocks = 0;
  double stored_kib = 0, raw_kib = 0;         // mean per block
  double read_warm_us = 0, read_cold_us = 0;  // pread of the payload (medians)
  double verify_us = 0;                       // XXH3 of the payload
  double decompress_us = 0;                   // zstd, one call for the whole frame
  double decompress_first_us = 0;             // zstd block by block: until the first piece is out
  double decompress_streamed_us = 0;          // zstd block by block: the whole frame
  double pieces = 0;                          // zstd blocks per frame (mean)
  double install_us = 0;                      // UFFDIO_COPY of the block's pages (runs of adjacent pages), no faults
  double pages_per_install_call = 0;
  double decompress_gbps = 0, verify_gbps = 0;  // raw GB/s out of zstd, payload GB/s through XXH3
};
// Times each step for `sample` blocks of `ckpt` (one thread). Cold reads drop the page cache first.
BlockCosts MeasureBlockCosts(const std::string& ckpt, size_t sample);

// One block fault at a time on real userfaultfd memory, through LazyMemory and the engine (loader off): a thread
// touches one page of a block whose nothing is in yet, and the time until the touch returns is taken (fault to
// wake, as the guest sees it); then the time until the handler is done with the block. Best of three per block
// (fresh memory and engine each time, warm page cache), median over `sample` blocks. The page touched is the one
// in slot `slot_fraction` x the block's members (0: the first slot).
struct FaultToWake {
  double touch_us = 0;  // fault -> the touching thread resumed with its page
  double block_us = 0;  // fault -> the whole block installed (the handler's HandleFault returned)
};
FaultToWake MeasureFaultToWake(const std::string& ckpt, size_t sample, bool stream, double slot_fraction);

}  // namespace halite::bench

#endif  // HALITE_BENCH_ENGINE_MACHINE_LIMITS_H_
