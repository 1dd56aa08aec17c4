#include "halite/qemu/qemu_session.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>

#include "halite/qemu/qemu_migration_control.h"
#include "qemu_clock.h"

namespace halite::qemu {
Result<SavedVmState> SaveFromQemu(QmpClient& qmp, MigrationStreamHandler& handler, const SaveOptions& options,
                                  SaveReport* report) {
  SaveReport local;
  if (report == nullptr) report = &local;
  const auto t0 = Clock::now();
  HLT_ASSIGN_OR_RETURN(Json status, qmp.Execute("query-status"));
  report->was_running = status.Find("running") != nullptr && status.Find("running")->as_bool();
  HLT_ASSIGN_OR_RETURN(std::vector<RamBlockInfo> blocks, QueryRamBlocks(qmp));
  MigrationStreamReaderOptions ropts = options.reader;
  for (const auto& b : blocks) ropts.block_page_sizes[b.name] = b.page_size;
  // The stream may announce no more RAM than QEMU says the guest has: every block at its maximum length (a
  // resizeable block may grow up to it before the save).
  uint64_t qmp_ram = 0;
  for (const auto& b : blocks) {
    const uint64_t most = std::max(b.used_length, b.max_length);
    qmp_ram = most > UINT64_MAX - qmp_ram ? UINT64_MAX : qmp_ram + most;
  }
  ropts.max_ram_bytes = std::min(ropts.max_ram_bytes, qmp_ram);

  if (!options.live && report->was_running) {
    HLT_ASSIGN_OR_RETURN(Json ignored, qmp.Execute("stop"));
    (void)ignored;
  }
  auto resume = [&]() -> Status {
    if (options.then == SaveOptions::Then::kQuit) return qmp.Execute("quit").status();
    if (options.then == SaveOptions::Then::kContinue && report->was_running && !options.live) {
      return qmp.Execute("cont").status();
    }
    return Status::Ok();
  };
  // Precopy into us, nothing that changes the record format; background-snapshot only when asked.
  Status s = SetMigrationCapabilities(qmp, {{"background-snapshot", options.live},
                                            {"postcopy-ram", false},
                                            {"xbzrle", false},
                                            {"compress", false},
                                            {"multifd", false}});
  if (!s.ok()) {
    (void)resume();
    return s;
  }
  auto fd = StartMigrationToFd(qmp);
  if (!fd.has_value()) {
    (void)resume();
    return fd.error();
  }
  FdSource source(fd->get(), FdSourceOptions{"migration stream", 0, 120000});
  MigrationStreamReader reader(&source, &handler, ropts);
  s = reader.Run();
  fd->reset();
  if (!s.ok()) {
    (void)qmp.Execute("migrate_cancel");
    (void)resume();
    return ExplainMigrationFailure(s, qmp, nullptr);
  }
  auto done = WaitForMigrationStatus(qmp, {"completed"}, options.timeout_ms);
  if (!done.has_value()) {
    (void)resume();
    return done.error();
  }
  report->stream = reader.stats();
  report->out_of_order_pages = reader.out_of_order_pages();
  report->arrival_order = reader.arrival_order();
  report->missing_pages = reader.MissingPages().size();
  SavedVmState state = reader.TakeState();  // last: MissingPages needs the block list
  for (auto& b : state.ram_blocks) {
    for (const auto& q : blocks) {
      if (q.name == b.name) b.page_size = q.page_size;
    }
  }
  HLT_RETURN_IF_ERROR(resume());
  report->total_us = MicrosSince(t0);
  if (report->missing_pages != 0) {
    return Status::Corrupt("migration stream: " + std::to_string(report->missing_pages) +
                           " pages of the announced RAMBlocks never arrived");
  }
  return state;
}

}  // namespace halite::qemu
