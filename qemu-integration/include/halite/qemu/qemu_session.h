// The whole save conversation with one QEMU: stop (or background-snapshot) a running QEMU, have it migrate into
// us, stream its pages to a handler, keep the rest. Borrows the QmpClient for the call. (Restoring is
// RestoreCheckpointIntoQemu in qemu_checkpoint.h: the restore engine pushes through qemu_push_source.h.)
#ifndef HALITE_QEMU_QEMU_SESSION_H_
#define HALITE_QEMU_QEMU_SESSION_H_

#include <cstdint>
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
// sizes (from `info ramblock`). The stream may announce at most the RAM `info ramblock` lists (every block at its
// maximum length; options.reader.max_ram_bytes lowers it further). Fails if QEMU reports the migration failed,
// the stream is incomplete, or it breaks a limit of MigrationStreamReaderOptions (corrupt).
Result<SavedVmState> SaveFromQemu(QmpClient& qmp, MigrationStreamHandler& handler, const SaveOptions& options,
                                  SaveReport* report);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_SESSION_H_
