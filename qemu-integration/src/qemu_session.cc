#include "halite/qemu/qemu_session.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>

#include "halite/qemu/qemu_migration_control.h"
#include "qemu_clock.h"

namespace halite::qemu {
namespace {

// Reads `fd` to its end and drops what comes (no more than QEMU sends: it closes its end when its migration ends).
// An error when reading fails or QEMU sends nothing for 2 minutes.
Status DrainStream(int fd) {
  FdSource rest(fd, FdSourceOptions{"migration stream (dropped)", 0, 120000});
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    HLT_ASSIGN_OR_RETURN(size_t n, rest.ReadSome(buf.data(), buf.size()));
    if (n == 0) return Status::Ok();
  }
}

}  // namespace

Result<SavedVmState> SaveFromQemu(QmpClient& qmp, MigrationStreamHandler& handler, const SaveOptions& options,
                                  SaveReport* report) {
  SaveReport local;
  if (report == nullptr) report = &local;
  const auto t0 = Clock::now();
  HLT_ASSIGN_OR_RETURN(Json status, qmp.Execute("query-status"));
  report->was_running = FindMember(status, "running") != nullptr && AsBool(*FindMember(status, "running"));
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
  auto fd = StartMigrationToFd(qmp, "halite-outgoing", options.before_migrate);
  if (!fd.has_value()) {
    (void)resume();
    return fd.error();
  }
  FdSource source(fd->get(), FdSourceOptions{"migration stream", 0, 120000});
  MigrationStreamReader reader(&source, &handler, ropts);
  s = reader.Run();
  if (!s.ok() && options.live && DrainStream(fd->get()).ok()) {
    // QEMU 7.2 lifts its write protection of the guest's RAM only when a background snapshot completes: a
    // cancelled or failed one leaves it, and the guest hangs at its next write to any page not yet sent. So the
    // rest of the stream is read and dropped, and the snapshot ends as QEMU expects.
    fd->reset();
    (void)WaitForMigrationStatus(qmp, {"completed"}, options.timeout_ms);
    return Status(s.code(),
                  s.message() + " (the rest of QEMU's stream was read and dropped: its background snapshot "
                                "completed, so that the guest goes on)",
                  s.sys_errno());
  }
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
  if (const Json* t = FindMember(done->raw, "setup-time")) report->qemu_setup_ms = AsInt(*t);
  if (const Json* t = FindMember(done->raw, "downtime")) report->qemu_downtime_ms = AsInt(*t);
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
