// QMP steps around a migration: channels into and out of QEMU, its RAMBlocks, and its migration status.
//
// These are the few QMP conversations hlt-save and hlt-restore have with QEMU; each takes the QmpClient it
// uses by reference (borrowed for the call) and returns what it learned.
#ifndef HALITE_QEMU_QEMU_MIGRATION_CONTROL_H_
#define HALITE_QEMU_QEMU_MIGRATION_CONTROL_H_

#include <functional>
#include <string>
#include <vector>

#include "halite/qemu/qemu_stream_input.h"
#include "halite/qemu/qmp_json.h"
#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/status.h"

namespace halite::qemu {

// Sets migration capabilities, e.g. {{"postcopy-ram", true}, {"events", true}}.
Status SetMigrationCapabilities(QmpClient& qmp, const std::vector<std::pair<std::string, bool>>& caps);

// Destination side: a socketpair whose other end is passed to QEMU with getfd, then `migrate-incoming fd:NAME`.
// Returns our end of the channel (the stream goes out on it, the return path comes back on it).
Result<UniqueFd> StartIncomingOverFd(QmpClient& qmp, const std::string& fd_name = "halite-incoming");
// Destination side over a unix socket path QEMU listens on (libvirt-managed QEMU: the path must be absolute and
// reachable by QEMU's user). Connects and returns the connected socket.
Result<UniqueFd> StartIncomingOverUnix(QmpClient& qmp, const std::string& socket_path, int timeout_ms = 10000);

// Postcopy recovery on a destination whose restore paused (its source died): the same two ways, with
// `migrate-recover` instead of `migrate-incoming`. The new source then resumes (PushRestoreChannel::BeginResume).
Result<UniqueFd> StartRecoveryOverFd(QmpClient& qmp, const std::string& fd_name = "halite-recover");
Result<UniqueFd> StartRecoveryOverUnix(QmpClient& qmp, const std::string& socket_path, int timeout_ms = 10000);

// Source side: passes one end of a socketpair with getfd and starts `migrate fd:NAME`. Returns our end, from
// which the stream is read; QEMU closes its end when the migration ends. `before_migrate` (optional) runs between
// the two, as late as possible before QEMU starts; its error stops everything before the migration (the passed
// descriptor is closed in QEMU again).
Result<UniqueFd> StartMigrationToFd(QmpClient& qmp, const std::string& fd_name = "halite-outgoing",
                                    const std::function<Status()>& before_migrate = nullptr);

// Parses `info ramblock`: name, page size (PSize), used and total (maximum) length of every RAMBlock.
Result<std::vector<RamBlockInfo>> QueryRamBlocks(QmpClient& qmp);

struct MigrationStatus {
  std::string status;      // "none", "setup", "active", "postcopy-active", "completed", "failed", ...
  std::string error_desc;  // QEMU's error-desc when failed
  Json raw;                // the whole query-migrate reply
};
Result<MigrationStatus> QueryMigration(QmpClient& qmp);
// Polls query-migrate until the status is one of `wanted` or "failed"/"cancelled" (an error naming QEMU's
// error-desc unless that status was wanted), or timeout_ms passes (io-error).
Result<MigrationStatus> WaitForMigrationStatus(QmpClient& qmp, const std::vector<std::string>& wanted, int timeout_ms);

// Guest state queries used by tests and by hlt-save (guest must not be running to get a stable answer).
// Reads guest-physical memory [addr, addr + size) via `pmemsave` into a file in dir and returns its bytes.
Result<std::string> ReadGuestMemory(QmpClient& qmp, uint64_t addr, uint64_t size, const std::string& dir);

// Adds what QEMU knows about a failure `s` to it: whether the process died and how (when `process`, a QEMU this
// process launched, is given; its stderr tail too), else its migration status and error.
Status ExplainMigrationFailure(const Status& s, QmpClient& qmp, QemuProcess* process);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_MIGRATION_CONTROL_H_
