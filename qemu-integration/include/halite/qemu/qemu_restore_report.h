// The reports of a restore into QEMU: the summary lines, the start line and the report `hlt-restore qemu` prints,
// and the statistics document of --stats-json. Here so that the tools, the C API and the bindings print the same.
#ifndef HALITE_QEMU_QEMU_RESTORE_REPORT_H_
#define HALITE_QEMU_QEMU_RESTORE_REPORT_H_

#include <cstdint>
#include <string>

#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_restore_session.h"

namespace halite::qemu {

// "  time ... / requests ... / pages sent ... / faults ... / placement ... / blocks read ... / bytes read ..."
// lines of a restore's result; `tool_to_running_us`: from the caller's start to the guest running (0: unknown).
std::string RestoreSummaryText(const CheckpointRestoreResult& result, uint64_t tool_to_running_us);

// "restoring CKPT into QEMU (pid N): lazy (postcopy), loader on" (or "resuming ..."): a started session.
std::string RestoreSessionStartText(RestoreSession& session, const std::string& checkpoint);

// What a completed session did: the resume line, "restored CKPT (lazy)", the summary, the block cache and the
// QEMU process lines. `caller_start_wall_us`: when the caller started (wall clock, microseconds since the epoch).
std::string RestoreSessionReportText(RestoreSession& session, const std::string& checkpoint,
                                     int64_t caller_start_wall_us);

// Everything a completed session measured, as one JSON document and a newline (--stats-json; its keys are stable).
std::string RestoreSessionStatsJson(RestoreSession& session, const std::string& checkpoint,
                                    int64_t caller_start_wall_us);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RESTORE_REPORT_H_
