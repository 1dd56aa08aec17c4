// The files a restore into QEMU writes for its caller (hlt-restore qemu's --record-trace, --timeline, --stats-json
// and --progress-log): what each one needs of the restore before it starts, and writing them once it completed.
// Here so that the tools, the C API and the bindings write the same files.
#ifndef HALITE_QEMU_QEMU_RESTORE_FILES_H_
#define HALITE_QEMU_QEMU_RESTORE_FILES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_restore_session.h"
#include "halite/status.h"

namespace halite::qemu {

// Where each file goes; empty: not written.
struct RestoreFilePaths {
  std::string access_trace;  // the pages QEMU asked for, in order (hint_files.h's access trace, for relayout)
  std::string timeline;      // the engine's fault and block-load timeline (CSV)
  std::string stats_json;    // RestoreSessionStatsJson
  // Every 10 ms while pages move: wall_us,faults_blocking,faults_zero,blocks_read,bytes_read,requests,pages_sent,
  // stall_us (CSV, wall_us in microseconds since the epoch).
  std::string progress_log;
};

// Not thread-safe, except that the progress callback Prepare installs may run on the restore's thread while the
// caller waits in RestoreSession::Run.
class RestoreFiles {
 public:
  explicit RestoreFiles(RestoreFilePaths paths);
  // Before RestoreSession::Start: asks the restore to record its timeline when one is wanted and, for the progress
  // log, to report progress every 10 ms (after the callback already set, if any).
  void Prepare(CheckpointRestoreOptions* restore);
  // After a successful Run: writes each file asked for. Errors: kIoError naming the first file not written.
  Status Write(RestoreSession& session, const std::string& checkpoint, int64_t caller_start_wall_us) const;

 private:
  RestoreFilePaths paths_;
  std::shared_ptr<std::string> progress_csv_;  // shared with the progress callback, which may outlive this
};

// Adds `fn` to the restore's progress callbacks (after the one already set) and makes them come at least every
// `interval_ms`.
void AddRestoreProgress(CheckpointRestoreOptions* restore, decltype(CheckpointRestoreOptions::on_progress) fn,
                        int interval_ms);

// Microseconds since the epoch by the wall clock: what RestoreSessionTimes and `caller_start_wall_us` count.
int64_t WallClockUs();

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RESTORE_FILES_H_
