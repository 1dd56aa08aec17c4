// The guest's working set, observed just before a save: the accessed bits of its page tables sampled over a
// window while it runs (halite/x86_accessed_pages.h), so that a stopped-guest save, which sees no accesses of its
// own, still lays out first what the guest was touching. Works under TCG and KVM alike and needs nothing of the
// host kernel: QEMU's HMP (`info registers -a`, `gpa2hva`) and /proc/PID/mem.
//
// Each sample stops the guest (QMP stop), reads the vCPUs' paging roots, walks and clears, and continues it: a
// few milliseconds a sample. Management layers see each pause (libvirt emits suspended/resumed events).
#ifndef HALITE_QEMU_QEMU_ACCESS_WINDOW_H_
#define HALITE_QEMU_QEMU_ACCESS_WINDOW_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "halite/qemu/qemu_guest_info.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/status.h"
#include "halite/x86_accessed_pages.h"

namespace halite::qemu {

struct AccessWindowOptions {
  int window_ms = 2000;   // from the first sample (which only clears) to the last
  int interval_ms = 200;  // between samples
  // Leave the guest stopped after the last sample (a stopped-guest save follows at once); otherwise continue it.
  bool leave_stopped = false;
  // How the guest is paused and resumed (empty: QMP stop and cont).
  std::function<Status()> pause_guest, resume_guest;
};

struct AccessWindowReport {
  std::string skipped;          // empty when the window ran; otherwise why not (the save goes on without it)
  uint32_t samples = 0;         // the clearing one included
  uint32_t measured_roots = 0;  // address spaces measured, summed over samples
  uint32_t distinct_roots = 0;  // distinct vCPU roots seen
  uint64_t accessed_pages = 0;  // distinct guest pages reported (4 KiB and user 2 MiB mappings)
  uint64_t entries_cleared = 0;
  double pause_total_ms = 0, pause_max_ms = 0;  // the guest stopped for the samples
  double seconds = 0;
};

struct AccessWindow {
  std::vector<x86::AccessSample> samples;  // the measuring ones (the first, clearing sample is not kept)
  AccessWindowReport report;
  bool left_stopped = false;               // the guest is stopped now (options.leave_stopped and it ran)
};

// Samples the running guest behind `qmp` (QEMU's pid `pid`, RAM `ranges` from QueryGuestRamMap). Never fails
// the caller's save for the window's own reasons: a guest not in long mode, no permission over /proc/PID/mem,
// an HMP command QEMU does not have end the window with report.skipped saying why, the guest running again.
// Errors: only a QMP stop or cont that fails (the guest's state is then unknown).
Result<AccessWindow> SampleGuestAccesses(QmpClient& qmp, pid_t pid, const std::vector<GuestRamRange>& ranges,
                                         const AccessWindowOptions& options);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_ACCESS_WINDOW_H_
