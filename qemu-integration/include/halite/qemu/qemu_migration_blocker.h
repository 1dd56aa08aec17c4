// Keeps a QEMU from being migrated out (save, snapshot with memory, migrate) while its memory is still coming in.
//
// A guest restored lazily runs while its pages are still being served. An outgoing migration started then (a
// broker's `virsh save`, `snapshot-create --memspec`, `migrate`) gets as far as QEMU's migration setup before it
// fails ("duplicate yank instance" in QEMU 7.2: the incoming migration holds the yank instance), and leaves the
// outgoing state stuck in "setup" for good: no later migration works, and query-migrate stops reporting the
// restore's own progress. QEMU refuses such a migration cleanly, before any of that, when a migration blocker is
// registered. QMP has no command for a blocker of its own, but every block node of a format QEMU cannot migrate
// registers one while it exists: the guard adds such a node (a tiny read-only VDI image, attached to no device:
// invisible to the guest), named so that the refusal explains itself, and deletes it when the restore is done.
//
// The image reaches QEMU as a descriptor (add-fd), so no path needs to be open to QEMU's user or its AppArmor or
// SELinux profile.
#ifndef HALITE_QEMU_QEMU_MIGRATION_BLOCKER_H_
#define HALITE_QEMU_QEMU_MIGRATION_BLOCKER_H_

#include <string>

#include "halite/qemu/qemu_qmp_client.h"
#include "halite/status.h"

namespace halite::qemu {

// The block node's name, which QEMU's refusal quotes: "The vdi format used by node 'hlt-restore-in-progress'
// does not support live migration".
inline constexpr const char* kRestoreBlockerNode = "hlt-restore-in-progress";

class MigrationBlocker {
 public:
  // Registers the blocker in the QEMU behind `qmp` (which must outlive the blocker). `scratch_dir` holds the
  // image for a moment (it is unlinked once QEMU has the descriptor). Needs qemu-img (qemu-utils).
  static Result<MigrationBlocker> Install(QmpClient& qmp, const std::string& scratch_dir);
  MigrationBlocker() = default;
  MigrationBlocker(MigrationBlocker&& o) noexcept;
  MigrationBlocker& operator=(MigrationBlocker&& o) noexcept;
  MigrationBlocker(const MigrationBlocker&) = delete;
  MigrationBlocker& operator=(const MigrationBlocker&) = delete;
  // Removes the blocker if still installed (errors ignored: QEMU may be gone).
  ~MigrationBlocker();
  // Removes a blocker an earlier process installed (a restore that died and was resumed); ok when there is none.
  static Status RemoveLeftOver(QmpClient& qmp);

  // Deletes the node and its descriptor set: migrations work again.
  Status Remove();
  bool installed() const { return qmp_ != nullptr; }

 private:
  QmpClient* qmp_ = nullptr;
  int64_t fdset_ = -1;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_MIGRATION_BLOCKER_H_
