#include "halite/qemu/qemu_session.h"

#include <chrono>
#include <map>

#include "halite/qemu/qemu_migration_control.h"
#include "qemu_clock.h"

namespace halite::qemu {
namespace {

// Adds what QEMU knows about a failure: whether the process died (with its stderr), or its migration error.
Status Explain(const Status& s, QmpClient& qmp, QemuProcess* process) {
  if (process != nullptr) {
    // QEMU exits right after a failed incoming load; give it a moment so its stderr is complete.
    (void)process->Wait(500);
    if (!process->Alive()) return s.WithContext(process->Describe());
  }
  auto m = QueryMigration(qmp);
  std::string ctx;
  if (m.has_value()) {
    ctx = "QEMU migration status " + m->status;
    if (!m->error_desc.empty()) ctx += " (" + m->error_desc + ")";
  } else {
    ctx = "QEMU monitor unreachable (" + m.error().message() + ")";
  }
  if (process != nullptr) {
    const std::string tail = process->StderrTail(512);
    if (!tail.empty()) ctx += "; stderr: " + tail;
  }
  return s.WithContext(ctx);
}

}  // namespace

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
  FdSource source(fd->get(), 120000);
  MigrationStreamReader reader(&source, &handler, ropts);
  s = reader.Run();
  fd->reset();
  if (!s.ok()) {
    (void)qmp.Execute("migrate_cancel");
    (void)resume();
    return Explain(s, qmp, nullptr);
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

Status RestoreIntoQemu(QmpClient& qmp, const SavedVmState& state, RestorePageSource& pages,
                       const RestoreOptions& options, RestoreReport* report, QemuProcess* process) {
  RestoreReport local;
  if (report == nullptr) report = &local;
  *report = RestoreReport{};
  const auto t0 = Clock::now();
  const int64_t wall0 = WallMicros();

  PostcopyRestoreOptions post = options.postcopy;
  if (options.check_ram_blocks) {
    HLT_ASSIGN_OR_RETURN(std::vector<RamBlockInfo> dest, QueryRamBlocks(qmp));
    HLT_RETURN_IF_ERROR(CheckRamBlocksCompatible(state.ram_blocks, dest));
    if (post.pagesize_summary == 0) {
      // POSTCOPY_ADVISE must carry exactly the destination's own summary.
      for (const auto& b : dest) post.pagesize_summary |= b.page_size;
    }
  }
  if (options.lazy) {
    Status s = SetMigrationCapabilities(qmp, {{"postcopy-ram", true}});
    if (s.code() == StatusCode::kInvalidArgument) {  // QEMU refused the capability
      return Status::Unsupported(s.message() + " (postcopy needs userfaultfd: run QEMU as root or set "
                                               "vm.unprivileged_userfaultfd=1)");
    }
    HLT_RETURN_IF_ERROR(s);
  }
  Result<UniqueFd> fd = options.unix_socket_path.empty() ? StartIncomingOverFd(qmp)
                                                         : StartIncomingOverUnix(qmp, options.unix_socket_path);
  if (!fd.has_value()) return fd.error();

  Status s = options.lazy ? RunPostcopyRestore(fd->get(), state, pages, post, &report->postcopy)
                          : RunPrecopyRestore(fd->get(), state, pages, options.precopy, &report->precopy);
  fd->reset();
  if (!s.ok()) return Explain(s, qmp, process);

  auto done = WaitForMigrationStatus(qmp, {"completed"}, options.completion_timeout_ms);
  if (!done.has_value()) return Explain(done.error(), qmp, process);
  report->final_status = done->status;
  report->total_us = MicrosSince(t0);
  auto events = qmp.TakeEvents();
  if (events.has_value()) {
    for (const auto& ev : *events) {
      if (ev.name == "RESUME" && ev.host_time_us >= wall0) {
        report->start_to_running_us = static_cast<uint64_t>(ev.host_time_us - wall0);
        break;
      }
    }
  }
  return Status::Ok();
}

}  // namespace halite::qemu
