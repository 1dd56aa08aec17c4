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

// "guest running 12.3 ms after the restore began": on_running's line.
std::string GuestRunningText(uint64_t start_to_running_us);
// "guest resumed: QEMU acknowledged the recovery ... ms after the restore began (... ms after TOOL started)":
// on_resumed's line of a resumed restore; `caller_to_resumed_us` counts from the caller's start.
std::string GuestResumedText(uint64_t start_to_resumed_us, uint64_t caller_to_resumed_us, const std::string& tool);

// After a failed Run: what became of QEMU, for `tool` (e.g. "hlt-restore qemu") to print after the error. A
// resumable restore: QEMU keeps its guest waiting, and the command that resumes it; a QEMU the session launched
// and still alive: it is killed (when the session goes). Otherwise empty.
std::string RestoreFailureText(RestoreSession& session, const std::string& tool, const std::string& checkpoint);

// Everything a completed session measured, as one JSON document and a newline (--stats-json; its keys are stable).
std::string RestoreSessionStatsJson(RestoreSession& session, const std::string& checkpoint,
                                    int64_t caller_start_wall_us);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RESTORE_REPORT_H_
