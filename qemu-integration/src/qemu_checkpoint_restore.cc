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

// One restore into QEMU, phase by phase (RestoreCheckpointIntoQemu reads them top to bottom). Members are declared
// in the order they must outlive each other: the channel outlives the sinks, the sinks outlive the engine, whose
// threads install through them until it stops.
class QemuRestoreRun {
 public:
  QemuRestoreRun(const CheckpointReader& reader, QmpClient& qmp, const CheckpointRestoreOptions& options,
                 CheckpointRestoreResult* result, QemuProcess* process)
      : reader_(reader), qmp_(qmp), options_(options), result_(result), process_(process), t0_(Clock::now()) {
    result_->wall_start_us = WallMicros();
    result_->lazy = options.lazy;
  }
  // No request worker is inside the engine when it goes.
  ~QemuRestoreRun() {
    if (channel_) channel_->StopThreads();
    engine_.reset();
  }

  Status MatchRegionsToRamBlocks();
  // Resume: true when the restore had finished already (nothing left to serve).
  Result<bool> CheckDestination();
  Status PlanPlacement();
  Status OpenStream();
  Status CreateEngine();
  Status RunEagerDirect();
  Status RunEagerStream();
  Status RunLazy();
  Status Complete();
  bool eager_direct() const { return eager_direct_; }

 private:
  Status Fail(Status s);
  void PollRunningEvent();
  bool HeldBefore(PageRef p) const;
  Status AllStoredSent() const;
  Status PlaceDirectly();
  Status StartGuest();
  Status ResumeGuest();
  Status EndPostcopyStream();
  Status LoadWithProgress(const std::function<Status()>& load);
  Status WaitForLoaderWhilePolling();

  const CheckpointReader& reader_;
  QmpClient& qmp_;
  const CheckpointRestoreOptions& options_;
  CheckpointRestoreResult* result_;
  QemuProcess* process_;
  const Clock::time_point t0_;

  SavedVmState state_;
  std::vector<uint32_t> block_of_region_;
  std::vector<uint32_t> region_of_block_;
  std::vector<bool> shared_;  // per region: mapped from the image server, never sent
  std::vector<RamBlockInfo> dest_;
  DirectPlan plan_;
  bool eager_direct_ = false;
  PushRestoreOptions copts_;
  std::vector<std::vector<bool>> held_;  // resume: QEMU's page map of the big RAMBlocks
  RestoreEngineOptions eo_;
  UniqueFd fd_;
  std::optional<PushRestoreChannel> channel_;
  std::optional<ChannelSink> channel_sink_;
  UniqueFd qemu_uffd_;
  std::optional<DirectUffdSink> direct_sink_;
  std::optional<RoutingSink> sink_;
  std::unique_ptr<RestoreEngine> engine_;
};

// Region <-> RAMBlock by name; the sizes must agree (the state and the pages come from the same stream).
Status QemuRestoreRun::MatchRegionsToRamBlocks() {
  HLT_ASSIGN_OR_RETURN(state_, ReadSavedVmState(reader_));
  block_of_region_.assign(reader_.regions().size(), UINT32_MAX);
  region_of_block_.assign(state_.ram_blocks.size(), UINT32_MAX);
  for (uint32_t b = 0; b < state_.ram_blocks.size(); ++b) {
    auto r = reader_.FindRegion(state_.ram_blocks[b].name);
    if (!r || reader_.regions()[*r].size != state_.ram_blocks[b].used_length) {
      return Status::Corrupt(reader_.name() + ": RAMBlock " + state_.ram_blocks[b].name + " of the saved state " +
                             (r ? "differs in size from its region" : "has no region"));
    }
    block_of_region_[*r] = b;
    region_of_block_[b] = *r;
  }
  for (uint32_t r = 0; r < block_of_region_.size(); ++r) {
    if (block_of_region_[r] == UINT32_MAX) {
      return Status::Corrupt(reader_.name() + ": region " + reader_.regions()[r].name +
                             " is not a RAMBlock of the saved state");
    }
  }
  if (options_.resume && !options_.lazy) return Status::InvalidArgument("only a lazy restore can be resumed");
  shared_.assign(reader_.regions().size(), false);
  for (const std::string& name : options_.shared_regions) {
    auto r = reader_.FindRegion(name);
    if (!r) return Status::InvalidArgument(reader_.name() + ": no region " + name + " to map from the image server");
    if (options_.lazy) return Status::InvalidArgument("shared regions are for an eager (precopy) restore");
    shared_[*r] = true;
  }
  return Status::Ok();
}

// The destination: waiting for us (or paused, to resume), with the same RAMBlocks. Nothing is sent before these
// checks.
Result<bool> QemuRestoreRun::CheckDestination() {
  if (options_.resume) {
    HLT_ASSIGN_OR_RETURN(result_->resumed_from_status, WaitUntilPaused(qmp_, options_.resume_paused_wait_ms));
    if (result_->resumed_from_status == "completed") {
      result_->final_status = "completed";
      result_->total_us = MicrosSince(t0_);
      return true;
    }
  }
  HLT_ASSIGN_OR_RETURN(Json qs, qmp_.Execute("query-status"));
  const Json* st = FindMember(qs, "status");
  const std::string run_state = st != nullptr ? AsString(*st) : "";
  if (!options_.resume && run_state != "inmigrate") {
    return Status::InvalidArgument(qmp_.name() + ": QEMU is not waiting for an incoming migration (its status is " +
                                   run_state + "): start it with -incoming defer");
  }
  HLT_ASSIGN_OR_RETURN(dest_, QueryRamBlocks(qmp_));
  if (options_.check_ram_blocks) HLT_RETURN_IF_ERROR(CheckRamBlocksCompatible(state_.ram_blocks, dest_));
  return false;
}

// Direct placement is decided before anything is sent (so that --placement direct fails cleanly); only QEMU's
// userfaultfd itself has to wait for LISTEN. Postcopy is switched on here when the restore needs it.
Status QemuRestoreRun::PlanPlacement() {
  plan_ = PlanDirectPlacement(reader_, qmp_, options_, block_of_region_, state_.ram_blocks.size(), process_, shared_);
  if (!plan_.why_not.empty() && options_.placement == PagePlacement::kDirect) {
    return Status::Unsupported("cannot place pages directly in QEMU's memory: " + plan_.why_not);
  }
  result_->placement_reason = plan_.why_not;
  // Eager through QEMU's userfaultfd (qemu_checkpoint.h, PagePlacement): a postcopy stream whose guest is held
  // paused until every page is in. The channel's precopy load is the fallback.
  eager_direct_ = !options_.lazy && options_.shared_regions.empty() && plan_.why_not.empty();
  if (!options_.lazy && !options_.shared_regions.empty()) {
    // QEMU maps those regions itself; the rest (a few small RAMBlocks, in a clone) is not worth a postcopy.
    if (options_.placement == PagePlacement::kDirect) {
      return Status::Unsupported("cannot place pages directly in QEMU's memory: an eager restore with regions "
                                 "mapped from the image server goes through the stream");
    }
    result_->placement_reason = "eager with regions mapped from the image server";
  }
  if ((options_.lazy || eager_direct_) && !options_.resume) {
    Status s = SetMigrationCapabilities(qmp_, {{"postcopy-ram", true}});
    if (s.code() == StatusCode::kInvalidArgument) {
      const std::string why = s.message() + " (postcopy needs userfaultfd: run QEMU as root or set "
                                            "vm.unprivileged_userfaultfd=1";
      if (options_.lazy) return Status::Unsupported(why + ", or restore with --eager)");
      if (options_.placement == PagePlacement::kDirect) {
        return Status::Unsupported("cannot place pages directly in QEMU's memory: " + why + ")");
      }
      eager_direct_ = false;  // the precopy stream needs no userfaultfd
      result_->placement_reason = why + ")";
    } else {
      HLT_RETURN_IF_ERROR(s);
    }
  }
  return Status::Ok();
}

// The migration stream: a new incoming one, or (resume) the recovery of the paused one. QEMU's page requests
// become engine faults.
Status QemuRestoreRun::OpenStream() {
  copts_ = options_.channel;
  copts_.lazy = options_.lazy || eager_direct_;
  if (copts_.pagesize_summary == 0) {
    for (const auto& b : dest_) copts_.pagesize_summary |= b.page_size;  // ADVISE carries the destination's own
  }
  if (options_.resume) {
    const pid_t pid = options_.qemu_pid > 0 ? options_.qemu_pid : process_ != nullptr ? process_->pid() : qmp_.PeerPid();
    HLT_ASSIGN_OR_RETURN(held_, PagesQemuHolds(reader_, qmp_, pid));
  }
  const std::string& unix_path = options_.unix_socket_path;
  Result<UniqueFd> fd = options_.resume ? (unix_path.empty() ? StartRecoveryOverFd(qmp_)
                                                             : StartRecoveryOverUnix(qmp_, unix_path))
                                        : unix_path.empty() ? StartIncomingOverFd(qmp_)
                                                            : StartIncomingOverUnix(qmp_, unix_path);
  if (!fd) return fd.error();
  fd_ = std::move(*fd);
  result_->start_to_connect_us = MicrosSince(t0_);
  channel_.emplace(fd_.get(), state_, copts_, [this](PageId id) -> Status {
    return engine_->HandleFault(PageRef{region_of_block_[id.block], id.page}).status();
  });
  channel_sink_.emplace(&*channel_, block_of_region_);
  sink_.emplace(&*channel_, &*channel_sink_, block_of_region_);
  // Resume: what QEMU holds is never sent again (the never-twice rule holds across restorers).
  if (options_.resume) {
    sink_->SetPresence([this](PageRef p) { return HeldBefore(p); });
    for (const auto& region : held_) result_->resume_present_pages += std::count(region.begin(), region.end(), true);
  }
  return Status::Ok();
}

bool QemuRestoreRun::HeldBefore(PageRef p) const {
  return (p.page < held_[p.region].size() && held_[p.region][p.page]) ||
         channel_->IsSent(PageId{block_of_region_[p.region], p.page});
}

// The engine's options follow the kind of restore.
Status QemuRestoreRun::CreateEngine() {
  eo_ = options_.engine;
  // The stream has to end some time: with the loader off, what the guest never asks for goes once it is idle.
  if (!eo_.background_loader && eo_.idle_sweep_ms == 0) eo_.idle_sweep_ms = kDefaultIdleSweepMs;
  if (options_.resume) {
    // The guest ran already: nothing is preloaded, and the engine takes what QEMU holds as installed.
    eo_.preload_working_set = false;
    eo_.preload_all = false;
    eo_.skip_present_at_start = true;
  }
  if (!options_.lazy) {
    // With shared regions only the other regions' pages go, one fault at a time below.
    eo_.preload_all = options_.shared_regions.empty();
    eo_.background_loader = false;
    eo_.idle_sweep_ms = 0;
    eo_.predict_segment_pages = 0;
    eo_.zero_window_pages = 512;  // zero pages are sent too, in long runs
  }
  result_->engine_created_wall_us = WallMicros();
  HLT_ASSIGN_OR_RETURN(engine_, RestoreEngine::Create(reader_, *sink_, eo_));
  // A resumed stream has no beginning: ResumeGuest continues the one QEMU was reading.
  Status s = options_.resume ? Status::Ok() : channel_->Begin();
  return s.ok() ? s : Fail(s);
}

// Polls QMP for the RESUME event (QEMU stamps it with its own clock).
void QemuRestoreRun::PollRunningEvent() {
  if (result_->start_to_running_us != 0) return;
  auto events = qmp_.TakeEvents();
  if (!events) return;
  for (const auto& ev : *events) {
    if (ev.name == "RESUME" && ev.host_time_us >= result_->wall_start_us) {
      result_->start_to_running_us = uint64_t(ev.host_time_us - result_->wall_start_us);
      if (options_.on_running) options_.on_running(result_->start_to_running_us);
      break;
    }
  }
}

// Any failure: stop the engine first (its loader writes into the channel), then explain.
Status QemuRestoreRun::Fail(Status s) {
  channel_->Abort(s);
  engine_->Stop();
  CollectStats(*engine_, *channel_, direct_sink_ ? &*direct_sink_ : nullptr, result_);
  // The first error wins: when the channel failed first (QEMU went away, a request could not be answered), the
  // engine's later errors are only consequences.
  Status why = channel_->status();
  if (why.ok()) why = s;
  return ExplainMigrationFailure(why, qmp_, process_);
}

// Every stored page is in QEMU before RAM END: sent in the stream, or placed directly (QEMU's cleanup unregisters
// its userfaultfd at the end; a page never placed would then read as zero).
Status QemuRestoreRun::AllStoredSent() const {
  for (uint64_t g = 0; g < reader_.total_pages(); ++g) {
    if (reader_.Locate(g).kind != PageKind::kStored) continue;
    const PageRef p = reader_.PageOf(g);
    const PageId id{block_of_region_[p.region], p.page};
    const bool in = (direct_sink_ && direct_sink_->IsDirect(p.region) ? direct_sink_->IsPlaced(p) || channel_->IsSent(id)
                                                                       : channel_->IsSent(id)) ||
                    (options_.resume && HeldBefore(p));
    if (!engine_->IsInstalled(p) || !in) {
      return Status::Internal("page " + std::to_string(p.page) + " of region " + reader_.regions()[p.region].name +
                              " was never sent");
    }
  }
  return Status::Ok();
}

// Takes QEMU's userfaultfd (guest RAM registered with it) for the big RAMBlocks, or falls back to the channel (an
// error under --placement direct).
Status QemuRestoreRun::PlaceDirectly() {
  auto uffd = DuplicateUserfaultfd(plan_.pid);
  if (!uffd) {
    sink_->Decide(nullptr);
    result_->placement_reason = uffd.error().message();
    if (options_.placement == PagePlacement::kDirect) {
      return Status::Unsupported("cannot place pages directly in QEMU's memory: " + uffd.error().message());
    }
    return Status::Ok();
  }
  qemu_uffd_ = std::move(*uffd);
  direct_sink_.emplace(qemu_uffd_.get(), plan_.regions);
  const DirectUffdSink* placed = &*direct_sink_;
  channel_->PlaceBlocksDirectly(plan_.blocks, [placed, this](PageId id) {
    return placed->IsPlaced(PageRef{region_of_block_[id.block], id.page});
  });
  sink_->Decide(&*direct_sink_, plan_.direct_regions);
  result_->placement = "direct";
  result_->placement_reason.clear();
  result_->direct_blocks = plan_.names;
  return Status::Ok();
}

// Right after PACKAGED: take QEMU's userfaultfd once LISTEN has registered guest RAM, or fall back.
Status QemuRestoreRun::StartGuest() {
  sink_->BeginListen();
  Status started = channel_->StartGuest();
  if (!started.ok() || plan_.names.empty()) {
    sink_->Decide(nullptr);
    return started;
  }
  const auto t_setup = Clock::now();
  Status listening = channel_->WaitUntilListening(10000);
  if (!listening.ok()) {
    sink_->Decide(nullptr);
    return listening;
  }
  Status placed = PlaceDirectly();
  result_->direct_setup_us = MicrosSince(t_setup);
  return placed;
}

// Resume: QEMU's userfaultfd covers guest RAM already; the placement is decided before the handshake, so that
// nothing can go out before it. Then the received bitmaps, RESUME_ACK, and the engine.
Status QemuRestoreRun::ResumeGuest() {
  if (plan_.names.empty()) {
    sink_->Decide(nullptr);
  } else {
    HLT_RETURN_IF_ERROR(PlaceDirectly());
  }
  HLT_RETURN_IF_ERROR(channel_->BeginResume(10000));
  result_->start_to_resumed_us = MicrosSince(t0_);
  result_->resume_present_pages += channel_->stats(false).resume_received_pages;
  if (options_.on_resumed) options_.on_resumed(result_->start_to_resumed_us);
  return engine_->Start();
}

// Postcopy, every stored page in: RAM END and EOF (QEMU may unregister its memory from then on, so a zero run
// placed late is done, not an error); the zero pages never sent read as zero.
Status QemuRestoreRun::EndPostcopyStream() {
  if (direct_sink_) direct_sink_->MarkStreamEnding();
  HLT_RETURN_IF_ERROR(channel_->Finish());
  for (uint64_t g = 0; g < reader_.total_pages(); ++g) {
    if (!engine_->IsInstalled(reader_.PageOf(g))) ++result_->zero_pages_unsent;
  }
  return Status::Ok();
}

// An eager load blocks for its whole length: progress comes from a reporter thread meanwhile.
Status QemuRestoreRun::LoadWithProgress(const std::function<Status()>& load) {
  std::atomic<bool> loaded{false};
  std::thread reporter;
  if (options_.on_progress && options_.progress_interval_ms > 0) {
    reporter = std::thread([&] {
      while (!loaded.load()) {
        options_.on_progress(engine_->Stats(), channel_->stats(false));
        std::this_thread::sleep_for(std::chrono::milliseconds(options_.progress_interval_ms));
      }
    });
  }
  Status ls = load();
  loaded = true;
  if (reporter.joinable()) reporter.join();
  if (ls.ok() && options_.on_progress && options_.progress_interval_ms > 0) {
    options_.on_progress(engine_->Stats(), channel_->stats(false));
  }
  return ls;
}

// Eager through QEMU's userfaultfd: QMP `stop` while QEMU is still `inmigrate` only clears its autostart, so
// postcopy's RUN leaves the vCPUs paused. Then LISTEN and the device state, QEMU's userfaultfd taken, every block
// placed by the preload threads (a whole block per UFFDIO_COPY, zero pages never: they read as zero once QEMU
// unregisters its memory at the end), the end of the stream, and `cont` in Complete. QEMU's own accesses to guest
// memory while it loads the device state are page requests, served as in a lazy restore.
Status QemuRestoreRun::RunEagerDirect() {
  Status s = qmp_.Execute("stop").status();
  if (s.ok()) s = StartGuest();
  if (s.ok()) s = LoadWithProgress([&] { return engine_->Start(); });
  if (s.ok()) s = AllStoredSent();
  if (!s.ok()) return Fail(s);
  result_->start_to_loaded_us = MicrosSince(t0_);
  s = EndPostcopyStream();
  return s.ok() ? s : Fail(s);
}

// Eager through the stream (the direct path is not permitted, or shared regions): every block (several threads),
// then every zero page, then the device state.
Status QemuRestoreRun::RunEagerStream() {
  Status s = LoadWithProgress([&] {
    Status ls = engine_->Start();
    for (uint64_t g = 0; ls.ok() && g < reader_.total_pages(); ++g) {
      PageRef p = reader_.PageOf(g);
      if (!shared_[p.region] && !engine_->IsInstalled(p)) ls = engine_->HandleFault(p).status();
    }
    return ls;
  });
  if (!s.ok()) return Fail(s);
  result_->start_to_loaded_us = MicrosSince(t0_);
  s = channel_->Finish();
  return s.ok() ? s : Fail(s);
}

// Lazy: a working-set preload goes before the device state; otherwise the guest starts first. Then QEMU's requests
// are served while the loader pushes the rest, and the stream ends.
Status QemuRestoreRun::RunLazy() {
  Status s;
  if (options_.resume) {
    s = ResumeGuest();
  } else if (eo_.preload_working_set) {
    s = engine_->Start();
    if (s.ok()) s = StartGuest();
  } else {
    s = StartGuest();
    if (s.ok()) s = engine_->Start();
  }
  if (!s.ok()) return Fail(s);
  HLT_RETURN_IF_ERROR(WaitForLoaderWhilePolling());
  s = AllStoredSent();
  if (!s.ok()) return Fail(s);
  if (options_.on_progress && options_.progress_interval_ms > 0) {
    options_.on_progress(engine_->Stats(), channel_->stats(false));
  }
  result_->start_to_loaded_us = MicrosSince(t0_);
  s = EndPostcopyStream();
  return s.ok() ? s : Fail(s);
}

// Until the loader is done: QEMU's RESUME event and the progress callback, polled; a failed channel stops it.
Status QemuRestoreRun::WaitForLoaderWhilePolling() {
  std::mutex mu;
  std::condition_variable cv;
  bool loader_done = false;
  Status loader_status;
  std::thread waiter([&] {
    Status ls = engine_->WaitForLoader();
    std::lock_guard<std::mutex> lock(mu);
    loader_status = ls;
    loader_done = true;
    cv.notify_all();
  });
  const bool progress = options_.on_progress && options_.progress_interval_ms > 0;
  const int period_ms = progress ? std::max(5, std::min(20, options_.progress_interval_ms)) : 20;
  auto next_progress = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(period_ms), [&] { return loader_done; });
      if (loader_done) break;
    }
    if (channel_->failed()) break;
    PollRunningEvent();
    if (progress && Clock::now() >= next_progress) {
      options_.on_progress(engine_->Stats(), channel_->stats(false));
      next_progress += std::chrono::milliseconds(options_.progress_interval_ms);
    }
  }
  if (channel_->failed()) {
    Status out = Fail(channel_->status());
    waiter.join();
    return out;
  }
  waiter.join();
  if (!loader_status.ok()) {
    // A block failed verification: its pages were never sent, so the stream must not end (QEMU would map them as
    // zero). The destination pauses when the channel goes down.
    return Fail(loader_status.WithContext(loader_status.code() == StatusCode::kCorrupt
                                              ? "restore stopped: a block of the checkpoint is damaged"
                                              : "restore stopped: the checkpoint could not be read"));
  }
  return Status::Ok();
}

// Every page is in: the statistics, QEMU's completion, and a precopy-loaded guest started.
Status QemuRestoreRun::Complete() {
  engine_->Stop();
  CollectStats(*engine_, *channel_, direct_sink_ ? &*direct_sink_ : nullptr, result_);
  for (const PageId& id : channel_->RequestedPages()) {
    result_->requested.push_back(PageRef{region_of_block_[id.block], id.page});
  }
  if (eo_.record_timeline) result_->timeline_csv = engine_->TimelineCsv();

  auto done = WaitForMigrationStatus(qmp_, {"completed"}, options_.completion_timeout_ms);
  if (!done) return ExplainMigrationFailure(done.error(), qmp_, process_);
  result_->final_status = done->status;
  result_->total_us = MicrosSince(t0_);
  PollRunningEvent();
  if (result_->start_to_running_us == 0 && !options_.lazy && !options_.paused) {
    // After a precopy load QEMU restores the saved run state, and hlt-save stopped the guest to save it: start it
    // (postcopy's RUN command does that by itself).
    HLT_ASSIGN_OR_RETURN(Json after, qmp_.Execute("query-status"));
    const Json* running = FindMember(after, "running");
    if (running == nullptr || !AsBool(*running)) HLT_RETURN_IF_ERROR(qmp_.Execute("cont").status());
    auto ev = qmp_.WaitForEvent("RESUME", 3000);
    if (ev && ev->host_time_us >= result_->wall_start_us) {
      result_->start_to_running_us = uint64_t(ev->host_time_us - result_->wall_start_us);
      if (options_.on_running) options_.on_running(result_->start_to_running_us);
    }
  }
  return Status::Ok();
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
  QemuRestoreRun run(reader, qmp, options, result, process);
  HLT_RETURN_IF_ERROR(run.MatchRegionsToRamBlocks());
  HLT_ASSIGN_OR_RETURN(const bool already_complete, run.CheckDestination());
  if (already_complete) return Status::Ok();  // a resumed restore that had finished: nothing left to serve
  HLT_RETURN_IF_ERROR(run.PlanPlacement());
  HLT_RETURN_IF_ERROR(run.OpenStream());
  HLT_RETURN_IF_ERROR(run.CreateEngine());
  if (!options.lazy) {
    HLT_RETURN_IF_ERROR(run.eager_direct() ? run.RunEagerDirect() : run.RunEagerStream());
  } else {
    HLT_RETURN_IF_ERROR(run.RunLazy());
  }
  return run.Complete();
}

}  // namespace halite::qemu
