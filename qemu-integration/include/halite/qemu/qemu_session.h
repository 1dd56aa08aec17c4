// The whole save conversation with one QEMU: stop (or background-snapshot) a running QEMU, have it migrate into
// us, stream its pages to a handler, keep the rest. Borrows the QmpClient for the call. (Restoring is
// RestoreCheckpointIntoQemu in qemu_checkpoint.h: the restore engine pushes through qemu_push_source.h.)
#ifndef HALITE_QEMU_QEMU_SESSION_H_
#define HALITE_QEMU_QEMU_SESSION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_qmp_client.h"
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
  // Called once the capabilities are set, right before `migrate`: whatever must happen at the instant the saved
  // state is taken (a live save captures memory and devices as they are when QEMU starts, see SaveFromQemu). An
  // error ends the save before QEMU started it.
  std::function<Status()> before_migrate;
};

struct SaveReport {
  MigrationStreamStats stream;
  std::vector<PageId> out_of_order_pages;  // working-set sample (live saves)
  std::vector<PageId> arrival_order;       // when reader.record_arrival_order
  uint64_t missing_pages = 0;              // announced pages that never arrived (0 for a sound stream)
  bool was_running = false;
  uint64_t total_us = 0;
  // What QEMU's query-migrate says of the finished migration (-1 when it does not): setup-time (a background
  // snapshot: RAM populated for write protection, the stream's setup) and downtime (a background snapshot: from
  // the end of the setup to the vCPUs started again, devices saved and RAM write-protected in between).
  int64_t qemu_setup_ms = -1;
  int64_t qemu_downtime_ms = -1;
};

// Saves the VM behind `qmp`; pages go to `handler` as they arrive. A live save (QEMU's background snapshot, QEMU
// 7.2 read for this) captures the devices and write-protects the guest's RAM in QEMU's migration thread shortly
// after `migrate` returns, with the vCPUs stopped for that moment; it sends the first RAM page only after both,
// so the first page handed to `handler` means the saved instant has passed. QEMU 7.2 then starts the vCPUs even
// when they were stopped before the save (later QEMUs leave them as they were). A live save that fails once QEMU
// started reads the rest of the stream and drops it: QEMU 7.2 lifts its write protection only when a background
// snapshot completes, and a failed or cancelled one leaves the guest hanging at its next write. The
// SavedVmState's blocks carry their page sizes (from `info ramblock`). The stream may announce at most the RAM
// `info ramblock` lists (every block at its maximum length; options.reader.max_ram_bytes lowers it further).
// Fails if QEMU reports the migration failed, the stream is incomplete, or it breaks a limit of
// MigrationStreamReaderOptions (corrupt).
Result<SavedVmState> SaveFromQemu(QmpClient& qmp, MigrationStreamHandler& handler, const SaveOptions& options,
                                  SaveReport* report);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_SESSION_H_
