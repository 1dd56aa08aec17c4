// The record a lazy QEMU restore leaves for whoever takes it over after hlt-restore dies (`hlt-restore qemu
// --resume`): which checkpoint (its file_id, so that a different file under the same name is refused), which
// QEMU (pid and process start time, so that a reused pid is not taken for it), and how it was reached.
//
// Where: <qemu dir>/halite-restore.json for a QEMU that hlt-restore launched, and always
// <run dir>/qemu-<pid>.json (run dir: $HALITE_RUN_DIR, else /run/halite/restores), found from the QMP socket's
// peer. Written atomically before the restore sends anything; removed when the restore completes.
#ifndef HALITE_QEMU_QEMU_RESTORE_RECORD_H_
#define HALITE_QEMU_QEMU_RESTORE_RECORD_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::qemu {

struct RestoreRecord {
  std::string checkpoint;       // as given to hlt-restore
  std::string file_id;          // the checkpoint's, lower-case hex
  pid_t qemu_pid = 0;
  uint64_t qemu_start_time = 0;  // /proc/PID/stat starttime (clock ticks after boot)
  std::string qmp_socket;
  std::string qemu_dir;          // launch mode only
  std::string incoming_socket;   // empty: a socketpair passed with getfd
  // Rewritten true once QEMU reports the guest running: a QEMU gone after that took the guest's memory with it
  // (nothing to resume), before it nothing of the guest existed yet (restore again from the start).
  bool guest_ran = false;
  // Launch mode: how to start the same QEMU again when it is gone (it exits when its restore dies before the
  // guest ran).
  std::string qemu_binary;
  std::vector<std::string> qemu_args;
};

inline constexpr const char* kRecordFileName = "halite-restore.json";

// $HALITE_RUN_DIR, else /run/halite/restores.
std::string RecordRunDir();
std::string RecordPathForPid(pid_t pid);

// Field 22 of /proc/PID/stat. Errors: kNotFound when there is no such process, or it has exited (a zombie).
Result<uint64_t> ProcessStartTime(pid_t pid);

// Writes `record` to `path` (a temporary name, fsync, rename; the directory is created). Errors: kIoError.
Status WriteRestoreRecord(const RestoreRecord& record, const std::string& path);
// Errors: kNotFound (no record: nothing to resume there), kCorrupt naming the file and what is wrong.
Result<RestoreRecord> ReadRestoreRecord(const std::string& path);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RESTORE_RECORD_H_
