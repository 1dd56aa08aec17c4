// Checkpoint -> QEMU (halite/qemu/qemu_checkpoint.h): the restore engine installs pages into a PageSink that
// writes them to QEMU's incoming migration; QEMU's page requests become engine faults.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "halite/page_sink.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_migration_control.h"
#include "qemu_clock.h"

namespace halite::qemu {
namespace {

// The engine's sink: each batch (one block, or one fault's zero pages) is one RAM section on the channel.
class ChannelSink final : public PageSink {
 public:
  ChannelSink(PushRestoreChannel* channel, std::vector<uint32_t> block_of_region)
      : channel_(channel), block_of_region_(std::move(block_of_region)) {}

  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override {
    *runs_installed = 0;
    HLT_ASSIGN_OR_RETURN(std::unique_ptr<RamSection> section, channel_->OpenSection(priority));
    for (const PageInstall& run : batch) {
      if (run.first.region >= block_of_region_.size() ||
          (!run.zero() && run.data.size() != run.count * kTargetPageSize)) {
        return Status::InvalidArgument("install of region " + std::to_string(run.first.region) + " pages " +
                                       std::to_string(run.first.page) + "+" + std::to_string(run.count));
      }
      const PageId id{block_of_region_[run.first.region], run.first.page};
      HLT_RETURN_IF_ERROR(run.zero() ? section->AddZeroPages(id, run.count)
                                     : section->AddPages(id, run.count, run.data.data()));
      ++*runs_installed;
    }
    return section->Close();
  }

  // Nothing is on the destination before the engine sends it: POSTCOPY_ADVISE discarded all of its RAM (lazy),
  // and an eager restore sends every page.
  bool IsPresent(PageRef) const override { return false; }

 private:
  PushRestoreChannel* channel_;
  std::vector<uint32_t> block_of_region_;
};

void CollectStats(const RestoreEngine& engine, const PushRestoreChannel& channel, CheckpointRestoreResult* result) {
  result->channel = channel.stats();
  result->engine = engine.StatsBeforeIdleSweep();
  result->engine_final = engine.Stats();
  result->sweep_blocks = result->engine_final.blocks_read_sweep;
}

}  // namespace

Result<SavedVmState> ReadSavedVmState(const CheckpointReader& reader) {
  if (reader.metadata().vmm_kind != VmmKind::kQemu) {
    return Status::InvalidArgument(reader.name() + ": not a QEMU checkpoint (VMM kind " +
                                   VmmKindName(reader.metadata().vmm_kind) + ")");
  }
  auto blob = reader.ReadBlob(kQemuStateBlobName);
  if (!blob) return blob.error();
  return DecodeSavedVmState(std::string_view(reinterpret_cast<const char*>(blob->data()), blob->size()),
                            reader.name() + ": blob " + kQemuStateBlobName);
}

Status RestoreCheckpointIntoQemu(const CheckpointReader& reader, QmpClient& qmp,
                                 const CheckpointRestoreOptions& options, CheckpointRestoreResult* result,
                                 QemuProcess* process) {
  CheckpointRestoreResult local;
  if (result == nullptr) result = &local;
  *result = CheckpointRestoreResult{};
  const auto t0 = Clock::now();
  result->wall_start_us = WallMicros();
  result->lazy = options.lazy;

  HLT_ASSIGN_OR_RETURN(SavedVmState state, ReadSavedVmState(reader));
  // Region <-> RAMBlock by name; the sizes must agree (the state and the pages come from the same stream).
  std::vector<uint32_t> block_of_region(reader.regions().size(), UINT32_MAX);
  std::vector<uint32_t> region_of_block(state.ram_blocks.size(), UINT32_MAX);
  for (uint32_t b = 0; b < state.ram_blocks.size(); ++b) {
    auto r = reader.FindRegion(state.ram_blocks[b].name);
    if (!r || reader.regions()[*r].size != state.ram_blocks[b].used_length) {
      return Status::Corrupt(reader.name() + ": RAMBlock " + state.ram_blocks[b].name + " of the saved state " +
                             (r ? "differs in size from its region" : "has no region"));
    }
    block_of_region[*r] = b;
    region_of_block[b] = *r;
  }
  for (uint32_t r = 0; r < block_of_region.size(); ++r) {
    if (block_of_region[r] == UINT32_MAX) {
      return Status::Corrupt(reader.name() + ": region " + reader.regions()[r].name +
                             " is not a RAMBlock of the saved state");
    }
  }

  for (const Region& region : reader.regions()) {
    if (region.host_page_size != kTargetPageSize) {
      // The restore engine installs 4 KiB pages; a hugetlbfs-backed block needs whole huge pages placed at once.
      return Status::Unsupported(reader.name() + ": RAMBlock " + region.name + " is backed by " +
                                 std::to_string(region.host_page_size >> 10) +
                                 " KiB pages: restoring huge-page-backed guest memory is not supported yet");
    }
  }
  std::vector<bool> shared(reader.regions().size(), false);
  for (const std::string& name : options.shared_regions) {
    auto r = reader.FindRegion(name);
    if (!r) return Status::InvalidArgument(reader.name() + ": no region " + name + " to map from the image server");
    if (options.lazy) return Status::InvalidArgument("shared regions are for an eager (precopy) restore");
    shared[*r] = true;
  }
  // The destination: waiting for us, with the same RAMBlocks. Nothing is sent before these checks.
  HLT_ASSIGN_OR_RETURN(Json qs, qmp.Execute("query-status"));
  const Json* st = qs.Find("status");
  const std::string run_state = st != nullptr ? st->as_string() : "";
  if (run_state != "inmigrate") {
    return Status::InvalidArgument(qmp.name() + ": QEMU is not waiting for an incoming migration (its status is " +
                                   run_state + "): start it with -incoming defer");
  }
  HLT_ASSIGN_OR_RETURN(std::vector<RamBlockInfo> dest, QueryRamBlocks(qmp));
  if (options.check_ram_blocks) HLT_RETURN_IF_ERROR(CheckRamBlocksCompatible(state.ram_blocks, dest));
  PushRestoreOptions copts = options.channel;
  copts.lazy = options.lazy;
  if (copts.pagesize_summary == 0) {
    for (const auto& b : dest) copts.pagesize_summary |= b.page_size;  // ADVISE carries the destination's own
  }
  if (options.lazy) {
    Status s = SetMigrationCapabilities(qmp, {{"postcopy-ram", true}});
    if (s.code() == StatusCode::kInvalidArgument) {
      return Status::Unsupported(s.message() +
                                 " (postcopy needs userfaultfd: run QEMU as root or set "
                                 "vm.unprivileged_userfaultfd=1, or restore with --eager)");
    }
    HLT_RETURN_IF_ERROR(s);
  }
  Result<UniqueFd> fd = options.unix_socket_path.empty() ? StartIncomingOverFd(qmp)
                                                         : StartIncomingOverUnix(qmp, options.unix_socket_path);
  if (!fd) return fd.error();
  result->start_to_connect_us = MicrosSince(t0);

  RestoreEngine* engine_ptr = nullptr;
  PushRestoreChannel channel(fd->get(), state, copts, [&](PageId id) -> Status {
    return engine_ptr->HandleFault(PageRef{region_of_block[id.block], id.page}).status();
  });
  ChannelSink sink(&channel, block_of_region);
  RestoreEngineOptions eo = options.engine;
  // The stream has to end some time: with the loader off, what the guest never asks for goes once it is idle.
  if (!eo.background_loader && eo.idle_sweep_ms == 0) eo.idle_sweep_ms = kDefaultIdleSweepMs;
  if (!options.lazy) {
    // With shared regions only the other regions' pages go, one fault at a time below.
    eo.preload_all = options.shared_regions.empty();
    eo.background_loader = false;
    eo.idle_sweep_ms = 0;
    eo.predict_segment_pages = 0;
    eo.zero_window_pages = 512;  // zero pages are sent too, in long runs
  }
  result->engine_created_wall_us = WallMicros();
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<RestoreEngine> engine, RestoreEngine::Create(reader, sink, eo));
  engine_ptr = engine.get();
  // Declared after the engine, so destroyed before it: no request worker is inside the engine when it goes.
  struct StopWorkers {
    PushRestoreChannel* c;
    ~StopWorkers() { c->StopThreads(); }
  } stop_workers{&channel};

  // Polls QMP for the RESUME event (QEMU stamps it with its own clock).
  auto poll_events = [&]() {
    if (result->start_to_running_us != 0) return;
    auto events = qmp.TakeEvents();
    if (!events) return;
    for (const auto& ev : *events) {
      if (ev.name == "RESUME" && ev.host_time_us >= result->wall_start_us) {
        result->start_to_running_us = uint64_t(ev.host_time_us - result->wall_start_us);
        if (options.on_running) options.on_running(result->start_to_running_us);
        break;
      }
    }
  };
  // Any failure: stop the engine first (its loader writes into the channel), then explain.
  auto fail = [&](Status s) -> Status {
    channel.Abort(s);
    engine->Stop();
    CollectStats(*engine, channel, result);
    // The first error wins: when the channel failed first (QEMU went away, a request could not be answered),
    // the engine's later errors are only consequences.
    Status why = channel.status();
    if (why.ok()) why = s;
    return ExplainMigrationFailure(why, qmp, process);
  };

  Status s = channel.Begin();
  if (!s.ok()) return fail(s);
  const uint64_t total_pages = reader.total_pages();
  auto all_stored_sent = [&]() -> Status {
    for (uint64_t g = 0; g < total_pages; ++g) {
      if (reader.Locate(g).kind == PageKind::kStored && !engine->IsInstalled(reader.PageOf(g))) {
        PageRef p = reader.PageOf(g);
        return Status::Internal("page " + std::to_string(p.page) + " of region " + reader.regions()[p.region].name +
                                " was never sent");
      }
    }
    return Status::Ok();
  };

  if (!options.lazy) {
    // Eager: every block (several threads), then every zero page, then the device state. Progress comes from a
    // reporter thread: the loading calls below block for the whole load.
    std::atomic<bool> loaded{false};
    std::thread reporter;
    if (options.on_progress && options.progress_interval_ms > 0) {
      reporter = std::thread([&] {
        while (!loaded.load()) {
          options.on_progress(engine->Stats(), channel.stats(false));
          std::this_thread::sleep_for(std::chrono::milliseconds(options.progress_interval_ms));
        }
      });
    }
    s = engine->Start();
    for (uint64_t g = 0; s.ok() && g < total_pages; ++g) {
      PageRef p = reader.PageOf(g);
      if (!shared[p.region] && !engine->IsInstalled(p)) s = engine->HandleFault(p).status();
    }
    loaded = true;
    if (reporter.joinable()) reporter.join();
    if (!s.ok()) return fail(s);
    if (options.on_progress && options.progress_interval_ms > 0) options.on_progress(engine->Stats(), channel.stats(false));
    result->start_to_loaded_us = MicrosSince(t0);
    s = channel.Finish();
    if (!s.ok()) return fail(s);
  } else {
    // Lazy: a working-set preload goes before the device state; otherwise the guest starts first.
    if (eo.preload_working_set) {
      s = engine->Start();
      if (s.ok()) s = channel.StartGuest();
    } else {
      s = channel.StartGuest();
      if (s.ok()) s = engine->Start();
    }
    if (!s.ok()) return fail(s);

    std::mutex mu;
    std::condition_variable cv;
    bool loader_done = false;
    Status loader_status;
    std::thread waiter([&] {
      Status ls = engine->WaitForLoader();
      std::lock_guard<std::mutex> lock(mu);
      loader_status = ls;
      loader_done = true;
      cv.notify_all();
    });
    const bool progress = options.on_progress && options.progress_interval_ms > 0;
    const int period_ms = progress ? std::max(5, std::min(20, options.progress_interval_ms)) : 20;
    auto next_progress = Clock::now();
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(period_ms), [&] { return loader_done; });
        if (loader_done) break;
      }
      if (channel.failed()) break;
      poll_events();
      if (progress && Clock::now() >= next_progress) {
        options.on_progress(engine->Stats(), channel.stats(false));
        next_progress += std::chrono::milliseconds(options.progress_interval_ms);
      }
    }
    if (channel.failed()) {
      Status out = fail(channel.status());
      waiter.join();
      return out;
    }
    waiter.join();
    if (!loader_status.ok()) {
      // A block failed verification: its pages were never sent, so the stream must not end (QEMU would map
      // them as zero). The destination pauses when the channel goes down.
      return fail(loader_status.WithContext("restore stopped: a block of the checkpoint is damaged"));
    }
    s = all_stored_sent();
    if (!s.ok()) return fail(s);
    if (progress) options.on_progress(engine->Stats(), channel.stats(false));
    result->start_to_loaded_us = MicrosSince(t0);
    s = channel.Finish();
    if (!s.ok()) return fail(s);
    for (uint64_t g = 0; g < total_pages; ++g) {
      if (!engine->IsInstalled(reader.PageOf(g))) ++result->zero_pages_unsent;
    }
  }
  engine->Stop();
  CollectStats(*engine, channel, result);
  for (const PageId& id : channel.RequestedPages())
    result->requested.push_back(PageRef{region_of_block[id.block], id.page});
  if (eo.record_timeline) result->timeline_csv = engine->TimelineCsv();

  auto done = WaitForMigrationStatus(qmp, {"completed"}, options.completion_timeout_ms);
  if (!done) return ExplainMigrationFailure(done.error(), qmp, process);
  result->final_status = done->status;
  result->total_us = MicrosSince(t0);
  poll_events();
  if (result->start_to_running_us == 0 && !options.lazy && !options.paused) {
    // After a precopy load QEMU restores the saved run state, and hlt-save stopped the guest to save it: start it
    // (postcopy's RUN command does that by itself).
    HLT_ASSIGN_OR_RETURN(Json after, qmp.Execute("query-status"));
    const Json* running = after.Find("running");
    if (running == nullptr || !running->as_bool()) HLT_RETURN_IF_ERROR(qmp.Execute("cont").status());
    auto ev = qmp.WaitForEvent("RESUME", 3000);
    if (ev && ev->host_time_us >= result->wall_start_us) {
      result->start_to_running_us = uint64_t(ev->host_time_us - result->wall_start_us);
      if (options.on_running) options.on_running(result->start_to_running_us);
    }
  }
  return Status::Ok();
}

}  // namespace halite::qemu
