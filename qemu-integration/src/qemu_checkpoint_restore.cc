// Checkpoint -> QEMU (halite/qemu/qemu_checkpoint.h): the restore engine installs pages into a PageSink that
// writes them to QEMU's incoming migration; QEMU's page requests become engine faults.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>

#include <fmt/format.h>

#include "halite/page_sink.h"
#include "halite/qemu/qemu_channel_sink.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_migration_control.h"
#include "halite/qemu/qemu_ram_mapping.h"
#include "qemu_clock.h"

namespace halite::qemu {
namespace {

// Routes each run to the channel or to a direct sink (QEMU's userfaultfd). Before LISTEN every run goes on the
// channel (placed before the guest starts: a preload); from just before PACKAGED until the placement is decided,
// installs wait (a few milliseconds: LISTEN's PONG); then runs of directly placed regions go to the direct sink,
// the others to the channel. The switch is exclusive against installs in flight, so no page of a direct block can
// reach the stream after LISTEN (which the channel also checks).
class RoutingSink final : public PageSink {
 public:
  RoutingSink(PushRestoreChannel* channel, ChannelSink* channel_sink, const std::vector<uint32_t>& block_of_region)
      : channel_(channel), channel_sink_(channel_sink), block_of_region_(block_of_region) {}

  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override {
    *runs_installed = 0;
    std::shared_lock<std::shared_mutex> lock(mu_);
    decided_cv_.wait(lock, [&] { return phase_ != Phase::kDeciding; });
    if (direct_ == nullptr) return channel_sink_->Install(batch, priority, runs_installed);
    for (size_t i = 0; i < batch.size();) {
      const bool direct = IsDirect(batch[i].first.region);
      size_t j = i + 1;
      while (j < batch.size() && IsDirect(batch[j].first.region) == direct) ++j;
      const std::span<const PageInstall> part = batch.subspan(i, j - i);
      size_t done = 0;
      Status s = direct ? CheckNeverSent(part) : Status::Ok();
      if (s.ok()) s = direct ? direct_->Install(part, priority, &done) : channel_sink_->Install(part, priority, &done);
      *runs_installed += done;
      if (!s.ok()) {
        // QEMU's memory is gone or an invariant broke: the channel fails too (QEMU pauses), so that the restore
        // reports this error rather than a consequence of it.
        if (direct) channel_->Abort(s);
        return s;
      }
      i = j;
    }
    return Status::Ok();
  }

  // A resumed restore: what QEMU held before it resumed (PagesQemuHolds), consulted before each install.
  bool IsPresent(PageRef page) const override { return present_ && present_(page); }
  // Before any install.
  void SetPresence(std::function<bool(PageRef)> present) { present_ = std::move(present); }

  // Just before PACKAGED goes out: installs wait from now on until Decide.
  void BeginListen() {
    std::unique_lock<std::shared_mutex> lock(mu_);
    phase_ = Phase::kDeciding;
  }
  // `direct` null: everything on the channel; else the runs of the regions marked in `regions` go to `direct`.
  void Decide(PageSink* direct, std::vector<bool> regions = {}) {
    {
      std::unique_lock<std::shared_mutex> lock(mu_);
      direct_ = direct;
      direct_regions_ = std::move(regions);
      phase_ = Phase::kDecided;
    }
    decided_cv_.notify_all();
  }

 private:
  bool IsDirect(uint32_t region) const { return region < direct_regions_.size() && direct_regions_[region]; }

  // A page placed directly must not have gone in the stream before (a preload): the other half of "never both".
  Status CheckNeverSent(std::span<const PageInstall> part) const {
    for (const PageInstall& run : part) {
      const uint32_t block = block_of_region_[run.first.region];
      for (uint64_t p = run.first.page; p < run.first.page + run.count; ++p) {
        if (channel_->IsSent(PageId{block, p})) {
          return Status::Internal(fmt::format("direct placement: page {} of region {} was sent in the stream",
                                              p, run.first.region));
        }
      }
    }
    return Status::Ok();
  }

  enum class Phase { kBeforeListen, kDeciding, kDecided };
  PushRestoreChannel* channel_;
  ChannelSink* channel_sink_;
  const std::vector<uint32_t>& block_of_region_;
  std::shared_mutex mu_;
  std::condition_variable_any decided_cv_;
  Phase phase_ = Phase::kBeforeListen;  // with mu_
  PageSink* direct_ = nullptr;          // with mu_
  std::vector<bool> direct_regions_;    // with mu_
  std::function<bool(PageRef)> present_;
};

// Which regions can be placed directly, found before anything is sent: QEMU's pid, the permission to take its
// descriptors, each big RAMBlock's host address.
struct DirectPlan {
  pid_t pid = -1;
  std::vector<DirectRegion> regions;  // per region
  std::vector<bool> direct_regions;   // per region
  std::vector<bool> blocks;           // per RAMBlock
  std::vector<std::string> names;
  std::string why_not;  // empty when some region can be placed directly
};

DirectPlan PlanDirectPlacement(const CheckpointReader& reader, QmpClient& qmp, const CheckpointRestoreOptions& options,
                               const std::vector<uint32_t>& block_of_region, size_t blocks, QemuProcess* process,
                               const std::vector<bool>& shared) {
  DirectPlan plan;
  plan.regions.resize(reader.regions().size());
  plan.direct_regions.assign(reader.regions().size(), false);
  plan.blocks.assign(blocks, false);
  if (options.placement == PagePlacement::kChannel) {
    plan.why_not = "--placement channel";
    return plan;
  }
  plan.pid = options.qemu_pid > 0 ? options.qemu_pid : process != nullptr ? process->pid() : qmp.PeerPid();
  if (plan.pid <= 0) {
    plan.why_not = "QEMU's pid is unknown (the QMP connection is not a unix socket)";
    return plan;
  }
  if (Status s = CheckCanDuplicateFds(plan.pid); !s.ok()) {
    plan.why_not = s.message();
    return plan;
  }
  std::string first_error;
  for (uint32_t r = 0; r < reader.regions().size(); ++r) {
    const Region& region = reader.regions()[r];
    if (region.size < kMinDirectBlockBytes) continue;  // small ROM/firmware blocks stay on the channel
    if (shared[r]) continue;                            // QEMU maps it from the image server: nothing is sent
    // hugetlbfs-backed blocks too: DirectUffdSink places each of their host pages whole, one UFFDIO_COPY each.
    auto address =
        RamBlockHostAddress(qmp, plan.pid, region.name, region.guest_phys_base, region.size, region.host_page_size);
    if (!address) {
      if (first_error.empty()) first_error = address.error().message();
      continue;
    }
    plan.regions[r] = DirectRegion{*address, region.size / kTargetPageSize, region.host_page_size};
    plan.direct_regions[r] = true;
    plan.blocks[block_of_region[r]] = true;
    plan.names.push_back(region.name);
  }
  if (plan.names.empty()) {
    plan.why_not = first_error.empty() ? "no RAMBlock of at least 2 MiB" : first_error;
  }
  return plan;
}

// Resume: QEMU's page map of each RAMBlock of at least kMinDirectBlockBytes (per region; empty for the small
// ones, whose pages only ever travel in the stream and so are all in QEMU's received bitmaps; a hugetlbfs block's
// map shows each huge page in QEMU as present in all of its pages). Taken before this process places anything:
// while QEMU is paused nobody else places pages.
Result<std::vector<std::vector<bool>>> PagesQemuHolds(const CheckpointReader& reader, QmpClient& qmp, pid_t pid) {
  std::vector<std::vector<bool>> held(reader.regions().size());
  if (pid <= 0) {
    return Status::Unsupported("resuming needs QEMU's pid to read its page map (the QMP connection is not a unix "
                               "socket)");
  }
  for (uint32_t r = 0; r < reader.regions().size(); ++r) {
    const Region& region = reader.regions()[r];
    if (region.size < kMinDirectBlockBytes) continue;
    HLT_ASSIGN_OR_RETURN(uint64_t address, RamBlockHostAddress(qmp, pid, region.name, region.guest_phys_base,
                                                               region.size, region.host_page_size));
    auto pages = PopulatedPages(pid, address, region.size / kTargetPageSize);
    if (!pages) {
      return Status::Unsupported("resuming needs QEMU's page map, to know which pages it holds: " +
                                 pages.error().message());
    }
    held[r] = std::move(*pages);
  }
  return held;
}

// Resume: waits until QEMU has noticed that its old source is gone. Returns the status to resume from
// ("postcopy-paused", or "completed" when there is nothing left to do).
Result<std::string> WaitUntilPaused(QmpClient& qmp, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    HLT_ASSIGN_OR_RETURN(MigrationStatus m, QueryMigration(qmp));
    if (m.status == "postcopy-paused" || m.status == "completed") return m.status;
    if (m.status == "postcopy-recover") {
      // QEMU 7.2 goes back to postcopy-paused only from postcopy-active: a recovery that died during its
      // handshake (milliseconds) leaves it here, where migrate-recover is refused (later QEMUs allow it).
      return Status::Unsupported("QEMU is in postcopy-recover: a resume was interrupted during its handshake, and "
                                 "this QEMU cannot start another recovery from there (its guest stays frozen)");
    }
    if (m.status != "postcopy-active") {
      return Status::InvalidArgument("QEMU's migration status is " + m.status +
                                     ": only a lazy restore that was running its guest (postcopy-paused) can be "
                                     "resumed" +
                                     (m.error_desc.empty() ? std::string() : " (" + m.error_desc + ")"));
    }
    if (Clock::now() > deadline) {
      return Status::InvalidArgument("QEMU's restore is still postcopy-active after " + std::to_string(timeout_ms) +
                                     " ms: its source is alive and serving it (stop that hlt-restore first)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void CollectStats(const RestoreEngine& engine, const PushRestoreChannel& channel, const DirectUffdSink* direct,
                  CheckpointRestoreResult* result) {
  result->channel = channel.stats();
  if (direct != nullptr) result->direct = direct->stats();
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

  if (options.resume && !options.lazy) return Status::InvalidArgument("only a lazy restore can be resumed");
  std::vector<bool> shared(reader.regions().size(), false);
  for (const std::string& name : options.shared_regions) {
    auto r = reader.FindRegion(name);
    if (!r) return Status::InvalidArgument(reader.name() + ": no region " + name + " to map from the image server");
    if (options.lazy) return Status::InvalidArgument("shared regions are for an eager (precopy) restore");
    shared[*r] = true;
  }
  // The destination: waiting for us (or paused, to resume), with the same RAMBlocks. Nothing is sent before
  // these checks.
  if (options.resume) {
    HLT_ASSIGN_OR_RETURN(result->resumed_from_status, WaitUntilPaused(qmp, options.resume_paused_wait_ms));
    if (result->resumed_from_status == "completed") {
      result->final_status = "completed";
      result->total_us = MicrosSince(t0);
      return Status::Ok();  // the restore had finished: nothing left to serve
    }
  }
  HLT_ASSIGN_OR_RETURN(Json qs, qmp.Execute("query-status"));
  const Json* st = FindMember(qs, "status");
  const std::string run_state = st != nullptr ? AsString(*st) : "";
  if (!options.resume && run_state != "inmigrate") {
    return Status::InvalidArgument(qmp.name() + ": QEMU is not waiting for an incoming migration (its status is " +
                                   run_state + "): start it with -incoming defer");
  }
  HLT_ASSIGN_OR_RETURN(std::vector<RamBlockInfo> dest, QueryRamBlocks(qmp));
  if (options.check_ram_blocks) HLT_RETURN_IF_ERROR(CheckRamBlocksCompatible(state.ram_blocks, dest));
  // Direct placement is decided before anything is sent (so that --placement direct fails cleanly); only QEMU's
  // userfaultfd itself has to wait for LISTEN.
  DirectPlan plan = PlanDirectPlacement(reader, qmp, options, block_of_region, state.ram_blocks.size(), process, shared);
  if (!plan.why_not.empty() && options.placement == PagePlacement::kDirect) {
    return Status::Unsupported("cannot place pages directly in QEMU's memory: " + plan.why_not);
  }
  result->placement_reason = plan.why_not;
  // Eager through QEMU's userfaultfd (qemu_checkpoint.h, PagePlacement): a postcopy stream whose guest is held
  // paused until every page is in. The channel's precopy load is the fallback.
  bool eager_direct = !options.lazy && options.shared_regions.empty() && plan.why_not.empty();
  if (!options.lazy && !options.shared_regions.empty()) {
    // QEMU maps those regions itself; the rest (a few small RAMBlocks, in a clone) is not worth a postcopy.
    if (options.placement == PagePlacement::kDirect) {
      return Status::Unsupported("cannot place pages directly in QEMU's memory: an eager restore with regions "
                                 "mapped from the image server goes through the stream");
    }
    result->placement_reason = "eager with regions mapped from the image server";
  }
  if (options.lazy || eager_direct) {
    if (!options.resume) {
      Status s = SetMigrationCapabilities(qmp, {{"postcopy-ram", true}});
      if (s.code() == StatusCode::kInvalidArgument) {
        const std::string why = s.message() + " (postcopy needs userfaultfd: run QEMU as root or set "
                                              "vm.unprivileged_userfaultfd=1";
        if (options.lazy) return Status::Unsupported(why + ", or restore with --eager)");
        if (options.placement == PagePlacement::kDirect) {
          return Status::Unsupported("cannot place pages directly in QEMU's memory: " + why + ")");
        }
        eager_direct = false;  // the precopy stream needs no userfaultfd
        result->placement_reason = why + ")";
      } else {
        HLT_RETURN_IF_ERROR(s);
      }
    }
  }
  PushRestoreOptions copts = options.channel;
  copts.lazy = options.lazy || eager_direct;
  if (copts.pagesize_summary == 0) {
    for (const auto& b : dest) copts.pagesize_summary |= b.page_size;  // ADVISE carries the destination's own
  }
  std::vector<std::vector<bool>> held;  // resume: QEMU's page map of the big RAMBlocks
  if (options.resume) {
    const pid_t pid = options.qemu_pid > 0 ? options.qemu_pid : process != nullptr ? process->pid() : qmp.PeerPid();
    HLT_ASSIGN_OR_RETURN(held, PagesQemuHolds(reader, qmp, pid));
  }
  Result<UniqueFd> fd = options.resume ? (options.unix_socket_path.empty()
                                              ? StartRecoveryOverFd(qmp)
                                              : StartRecoveryOverUnix(qmp, options.unix_socket_path))
                        : options.unix_socket_path.empty() ? StartIncomingOverFd(qmp)
                                                           : StartIncomingOverUnix(qmp, options.unix_socket_path);
  if (!fd) return fd.error();
  result->start_to_connect_us = MicrosSince(t0);

  RestoreEngine* engine_ptr = nullptr;
  PushRestoreChannel channel(fd->get(), state, copts, [&](PageId id) -> Status {
    return engine_ptr->HandleFault(PageRef{region_of_block[id.block], id.page}).status();
  });
  ChannelSink channel_sink(&channel, block_of_region);
  // Declared before the engine, so they outlive it (its threads install through them until it stops).
  UniqueFd qemu_uffd;
  std::optional<DirectUffdSink> direct_sink;
  RoutingSink sink(&channel, &channel_sink, block_of_region);
  // Resume: what QEMU holds is never sent again (the never-twice rule holds across restorers).
  auto held_before = [&](PageRef p) {
    return (p.page < held[p.region].size() && held[p.region][p.page]) ||
           channel.IsSent(PageId{block_of_region[p.region], p.page});
  };
  if (options.resume) {
    sink.SetPresence(held_before);
    for (const auto& region : held) result->resume_present_pages += std::count(region.begin(), region.end(), true);
  }
  RestoreEngineOptions eo = options.engine;
  // The stream has to end some time: with the loader off, what the guest never asks for goes once it is idle.
  if (!eo.background_loader && eo.idle_sweep_ms == 0) eo.idle_sweep_ms = kDefaultIdleSweepMs;
  if (options.resume) {
    // The guest ran already: nothing is preloaded, and the engine takes what QEMU holds as installed.
    eo.preload_working_set = false;
    eo.preload_all = false;
    eo.skip_present_at_start = true;
  }
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
    CollectStats(*engine, channel, direct_sink ? &*direct_sink : nullptr, result);
    // The first error wins: when the channel failed first (QEMU went away, a request could not be answered),
    // the engine's later errors are only consequences.
    Status why = channel.status();
    if (why.ok()) why = s;
    return ExplainMigrationFailure(why, qmp, process);
  };

  // A resumed stream has no beginning: BeginResume (below) continues the one QEMU was reading.
  Status s = options.resume ? Status::Ok() : channel.Begin();
  if (!s.ok()) return fail(s);
  const uint64_t total_pages = reader.total_pages();
  // Every stored page is in QEMU before RAM END: sent in the stream, or placed directly (QEMU's cleanup
  // unregisters its userfaultfd at the end; a page never placed would then read as zero).
  auto all_stored_sent = [&]() -> Status {
    for (uint64_t g = 0; g < total_pages; ++g) {
      if (reader.Locate(g).kind != PageKind::kStored) continue;
      const PageRef p = reader.PageOf(g);
      const PageId id{block_of_region[p.region], p.page};
      const bool in = (direct_sink && direct_sink->IsDirect(p.region) ? direct_sink->IsPlaced(p) || channel.IsSent(id)
                                                                       : channel.IsSent(id)) ||
                      (options.resume && held_before(p));
      if (!engine->IsInstalled(p) || !in) {
        return Status::Internal("page " + std::to_string(p.page) + " of region " + reader.regions()[p.region].name +
                                " was never sent");
      }
    }
    return Status::Ok();
  };
  // Takes QEMU's userfaultfd (guest RAM registered with it) for the big RAMBlocks, or falls back to the channel
  // (an error under --placement direct).
  auto place_directly = [&]() -> Status {
    auto uffd = DuplicateUserfaultfd(plan.pid);
    if (!uffd) {
      sink.Decide(nullptr);
      result->placement_reason = uffd.error().message();
      if (options.placement == PagePlacement::kDirect) {
        return Status::Unsupported("cannot place pages directly in QEMU's memory: " + uffd.error().message());
      }
      return Status::Ok();
    }
    qemu_uffd = std::move(*uffd);
    direct_sink.emplace(qemu_uffd.get(), plan.regions);
    const DirectUffdSink* placed = &*direct_sink;
    channel.PlaceBlocksDirectly(plan.blocks, [placed, &region_of_block](PageId id) {
      return placed->IsPlaced(PageRef{region_of_block[id.block], id.page});
    });
    sink.Decide(&*direct_sink, plan.direct_regions);
    result->placement = "direct";
    result->placement_reason.clear();
    result->direct_blocks = plan.names;
    return Status::Ok();
  };
  // Right after PACKAGED: take QEMU's userfaultfd once LISTEN has registered guest RAM, or fall back.
  auto start_guest = [&]() -> Status {
    sink.BeginListen();
    Status started = channel.StartGuest();
    if (!started.ok() || plan.names.empty()) {
      sink.Decide(nullptr);
      return started;
    }
    const auto t_setup = Clock::now();
    Status listening = channel.WaitUntilListening(10000);
    if (!listening.ok()) {
      sink.Decide(nullptr);
      return listening;
    }
    Status placed = place_directly();
    result->direct_setup_us = MicrosSince(t_setup);
    return placed;
  };
  // Resume: QEMU's userfaultfd covers guest RAM already; the placement is decided before the handshake, so
  // that nothing can go out before it. Then the received bitmaps, RESUME_ACK, and the engine.
  auto resume_guest = [&]() -> Status {
    if (plan.names.empty()) {
      sink.Decide(nullptr);
    } else {
      HLT_RETURN_IF_ERROR(place_directly());
    }
    HLT_RETURN_IF_ERROR(channel.BeginResume(10000));
    result->start_to_resumed_us = MicrosSince(t0);
    result->resume_present_pages += channel.stats(false).resume_received_pages;
    if (options.on_resumed) options.on_resumed(result->start_to_resumed_us);
    return engine->Start();
  };

  // Postcopy, every stored page in: RAM END and EOF (QEMU may unregister its memory from then on, so a zero run
  // placed late is done, not an error); the zero pages never sent read as zero.
  auto end_postcopy_stream = [&]() -> Status {
    if (direct_sink) direct_sink->MarkStreamEnding();
    HLT_RETURN_IF_ERROR(channel.Finish());
    for (uint64_t g = 0; g < total_pages; ++g) {
      if (!engine->IsInstalled(reader.PageOf(g))) ++result->zero_pages_unsent;
    }
    return Status::Ok();
  };
  // An eager load blocks for its whole length: progress comes from a reporter thread meanwhile.
  auto load_with_progress = [&](const std::function<Status()>& load) -> Status {
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
    Status ls = load();
    loaded = true;
    if (reporter.joinable()) reporter.join();
    if (ls.ok() && options.on_progress && options.progress_interval_ms > 0) {
      options.on_progress(engine->Stats(), channel.stats(false));
    }
    return ls;
  };

  if (eager_direct) {
    // Eager through QEMU's userfaultfd: QMP `stop` while QEMU is still `inmigrate` only clears its autostart, so
    // postcopy's RUN leaves the vCPUs paused. Then LISTEN and the device state, QEMU's userfaultfd taken, every
    // block placed by the preload threads (a whole block per UFFDIO_COPY, zero pages never: they read as zero once
    // QEMU unregisters its memory at the end), the end of the stream, and `cont` below. QEMU's own accesses to
    // guest memory while it loads the device state are page requests, served as in a lazy restore.
    s = qmp.Execute("stop").status();
    if (s.ok()) s = start_guest();
    if (s.ok()) s = load_with_progress([&] { return engine->Start(); });
    if (s.ok()) s = all_stored_sent();
    if (!s.ok()) return fail(s);
    result->start_to_loaded_us = MicrosSince(t0);
    s = end_postcopy_stream();
    if (!s.ok()) return fail(s);
  } else if (!options.lazy) {
    // Eager through the stream (the direct path is not permitted, or shared regions): every block (several
    // threads), then every zero page, then the device state.
    s = load_with_progress([&] {
      Status ls = engine->Start();
      for (uint64_t g = 0; ls.ok() && g < total_pages; ++g) {
        PageRef p = reader.PageOf(g);
        if (!shared[p.region] && !engine->IsInstalled(p)) ls = engine->HandleFault(p).status();
      }
      return ls;
    });
    if (!s.ok()) return fail(s);
    result->start_to_loaded_us = MicrosSince(t0);
    s = channel.Finish();
    if (!s.ok()) return fail(s);
  } else {
    // Lazy: a working-set preload goes before the device state; otherwise the guest starts first.
    if (options.resume) {
      s = resume_guest();
    } else if (eo.preload_working_set) {
      s = engine->Start();
      if (s.ok()) s = start_guest();
    } else {
      s = start_guest();
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
      return fail(loader_status.WithContext(loader_status.code() == StatusCode::kCorrupt
                                                ? "restore stopped: a block of the checkpoint is damaged"
                                                : "restore stopped: the checkpoint could not be read"));
    }
    s = all_stored_sent();
    if (!s.ok()) return fail(s);
    if (progress) options.on_progress(engine->Stats(), channel.stats(false));
    result->start_to_loaded_us = MicrosSince(t0);
    s = end_postcopy_stream();
    if (!s.ok()) return fail(s);
  }
  engine->Stop();
  CollectStats(*engine, channel, direct_sink ? &*direct_sink : nullptr, result);
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
    const Json* running = FindMember(after, "running");
    if (running == nullptr || !AsBool(*running)) HLT_RETURN_IF_ERROR(qmp.Execute("cont").status());
    auto ev = qmp.WaitForEvent("RESUME", 3000);
    if (ev && ev->host_time_us >= result->wall_start_us) {
      result->start_to_running_us = uint64_t(ev->host_time_us - result->wall_start_us);
      if (options.on_running) options.on_running(result->start_to_running_us);
    }
  }
  return Status::Ok();
}

}  // namespace halite::qemu
