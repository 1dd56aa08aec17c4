// Whole save and restore conversations with one QEMU, for hlt-save qemu / hlt-restore qemu to call.
//
// SaveFromQemu: stop (or background-snapshot) a running QEMU, have it migrate into us, stream its pages to a
// handler, keep the rest. RestoreIntoQemu: check a destination started with `-incoming defer`, start its
// incoming migration into us, and act as its source (eager or lazy). Both borrow the QmpClient for the call.
#ifndef HALITE_QEMU_QEMU_SESSION_H_
#define HALITE_QEMU_QEMU_SESSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/qemu/qemu_restore_source.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/qemu/qemu_stream_reader.h"
#include "halite/status.h"

namespace halite::qemu {

struct SaveOptions {
  // Background snapshot (capability background-snapshot): the guest keeps running; pages it writes during the
  // save arrive out of scan order (SaveReport::out_of_order_pages). Off: the guest is stopped first.
  bool live = false;
  enum class Then { kLeaveStopped, kContinue, kQuit };
  // After the save. kContinue resumes a guest that was running before (a live save never stops it).
  Then then = Then::kContinue;
  int timeout_ms = 600000;  // the whole save
  MigrationStreamReaderOptions reader;
};

struct SaveReport {
  MigrationStreamStats stream;
  std::vector<PageId> out_of_order_pages;  // working-set sample (live saves)
  std::vector<PageId> arrival_order;       // when reader.record_arrival_order
  uint64_t missing_pages = 0;              // announced pages that never arrived (0 for a sound stream)
  bool was_running = false;
  uint64_t total_us = 0;
};

// Saves the VM behind `qmp`; pages go to `handler` as they arrive. The SavedVmState's blocks carry their page
// sizes (from `info ramblock`). Fails if QEMU reports the migration failed, or the stream is incomplete.
Result<SavedVmState> SaveFromQemu(QmpClient& qmp, MigrationStreamHandler& handler, const SaveOptions& options,
                                  SaveReport* report);

struct RestoreOptions {
  bool lazy = true;  // postcopy (lazy) or precopy (eager)
  PostcopyRestoreOptions postcopy;
  PrecopyRestoreOptions precopy;
  // Compare the destination's RAMBlocks with the checkpoint's before sending anything (recommended: QEMU's own
  // check happens only while loading, after it has been told to expect a stream).
  bool check_ram_blocks = true;
  // Empty: a socketpair passed with getfd. Otherwise QEMU listens on this unix socket path (libvirt).
  std::string unix_socket_path;
  int completion_timeout_ms = 120000;  // for QEMU to report "completed" after the stream ended
};

struct RestoreReport {
  PostcopyRestoreStats postcopy;
  PrecopyRestoreStats precopy;
  uint64_t start_to_running_us = 0;  // call start to the destination's RESUME event (0 if not seen, e.g. -S)
  uint64_t total_us = 0;             // call start to QEMU reporting completed
  std::string final_status;          // QEMU's migration status at the end
};

// Restores `state` + pages into the QEMU behind `qmp` (started with -incoming defer). `process` (optional,
// borrowed) is the launched QEMU: when given, errors say whether it died and quote its stderr.
// Errors: invalid-argument (RAMBlocks differ, before anything is sent), unsupported (postcopy not available),
// io-error / aborted (QEMU went away or rejected the stream; the message carries its error), page source errors.
Status RestoreIntoQemu(QmpClient& qmp, const SavedVmState& state, RestorePageSource& pages,
                       const RestoreOptions& options, RestoreReport* report, QemuProcess* process = nullptr);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_SESSION_H_
