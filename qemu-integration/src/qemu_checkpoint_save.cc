// QEMU -> checkpoint (halite/qemu/qemu_checkpoint.h): the stream goes into the writer as it arrives; then the
// page-table hints (read back from the writer), the device state, Finish.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <optional>

#include "halite/checkpoint_location.h"
#include "halite/page_util.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_ram_mapping.h"
#include "halite/qemu/qemu_guest_info.h"
#include "halite/qemu/qemu_migration_control.h"
#include "halite/qemu/qemu_thp_regather.h"
#include "halite/x86_guest_hints.h"

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double Ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

constexpr uint64_t kPage = kTargetPageSize;

std::string OutputDir(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// `info mtree -f`'s RAM ranges in the writer's terms: RAMBlock names become region indexes; ranges of blocks the
// stream does not carry are dropped, and so are ranges that do not start on a page boundary in both guest-physical
// memory and their block: no page table maps such memory page for page (a TPM CRB's command buffer, RAMBlock
// "tpm-crb-cmd", shows at 0xfed40080), and a region's guest_phys_base is a multiple of 4096 (format spec 5.2).
std::vector<x86::GuestMemoryRange> MemoryMapOf(const std::vector<GuestRamRange>& ranges,
                                               const std::vector<RamBlockInfo>& blocks) {
  std::vector<x86::GuestMemoryRange> map;
  for (const GuestRamRange& r : ranges) {
    if (r.gpa % kPage != 0 || r.offset % kPage != 0) continue;
    for (uint32_t b = 0; b < blocks.size(); ++b) {
      if (blocks[b].name == r.block) map.push_back(x86::GuestMemoryRange{r.gpa, r.size, b, r.offset});
    }
  }
  return map;
}

// Where a block's offset 0 shows in guest-physical memory (the region's guest_phys_base), 0 when nowhere.
uint64_t BaseOf(uint32_t block, const std::vector<x86::GuestMemoryRange>& map) {
  for (const auto& r : map) {
    if (r.region == block && r.region_offset == 0) return r.gpa;
  }
  return 0;
}

// Streams the migration stream into the writer: pages as they come (zero pages in runs), the out-of-scan-order
// pages as the access trace, possible top-level page tables noted for the walk. Guest memory is never kept here:
// the walk reads it back from the writer.
class CheckpointStreamHandler final : public MigrationStreamHandler {
 public:
  CheckpointStreamHandler(const std::string& path, const CheckpointSaveOptions& options,
                          const std::vector<RamBlockInfo>& qmp_blocks, const std::vector<GuestRamRange>& ram_ranges)
      : path_(path), options_(options), qmp_blocks_(qmp_blocks), ram_ranges_(ram_ranges) {}

  Status OnConfiguration(const std::string& machine_type) override {
    machine_type_ = machine_type;
    return Status::Ok();
  }

  // The writer is made on a thread of its own (tens of ms for GiBs of RAM: its page table, its staging file), so
  // that the pages behind the RAM START section, and a live save's first page (the guest captured: resume it),
  // are not held up; the first use waits for it.
  Status OnRamBlocks(const std::vector<RamBlockInfo>& blocks) override {
    if (writer_made_.valid()) return Status::Internal("a second RAM block list");
    at_instant_.assign(blocks.size(), nullptr);
    for (size_t i = 0; i < blocks.size() && options_.block_content_at_instant; ++i) {
      const std::vector<uint8_t>* bytes = options_.block_content_at_instant(blocks[i].name, blocks[i].used_length);
      if (bytes == nullptr || bytes->size() != blocks[i].used_length) continue;
      at_instant_[i] = bytes;
      blocks_from_instant_.push_back(blocks[i].name);
    }
    writer_made_ = std::async(std::launch::async, [this, blocks] { return MakeWriter(blocks); });
    return Status::Ok();
  }

  Status MakeWriter(const std::vector<RamBlockInfo>& blocks) {
    WriterOptions wo = options_.writer;
    wo.metadata.vmm_kind = VmmKind::kQemu;
    wo.metadata.machine_type = machine_type_;
    if (wo.metadata.creator.empty()) wo.metadata.creator = "libhalite hlt-save qemu";
    // The guest runs while its checkpoint is compressed (a live save, or a stopped one continued after the
    // stream): the compression workers take only the CPU time the guest leaves.
    if (options_.live || options_.then == SaveOptions::Then::kContinue) wo.low_priority_workers = true;
    HLT_ASSIGN_OR_RETURN(writer_, CheckpointWriter::Create(path_, std::move(wo)));
    memory_map_ = MemoryMapOf(ram_ranges_, blocks);
    for (uint32_t i = 0; i < blocks.size(); ++i) {
      uint32_t host_page = 4096;
      for (const auto& q : qmp_blocks_) {
        if (q.name == blocks[i].name && q.page_size != 0) host_page = uint32_t(q.page_size);
      }
      HLT_ASSIGN_OR_RETURN(uint32_t region, writer_->AddRegion(blocks[i].name, BaseOf(i, memory_map_),
                                                               blocks[i].used_length, host_page));
      if (region != i)
        return Status::Internal("region index " + std::to_string(region) + " for block " + std::to_string(i));
    }
    if (options_.writer.parent && options_.is_parent_image && !options_.live) DeclareUnwrittenPages(blocks);
    return Status::Ok();
  }

  // Waits for MakeWriter (once); its error afterwards. Internal when the stream had no RAM section.
  Status WriterReady() {
    if (writer_made_.valid()) writer_status_ = writer_made_.get();
    if (writer_status_.ok() && writer_ == nullptr) return Status::Internal("the stream had no RAM section");
    return writer_status_;
  }

  // Issue 12 item 5: a RAMBlock privately mapped from the parent's image keeps the parent's content in every page
  // the guest never wrote; the page map names them while the guest is stopped (before any page of the stream is
  // given, so none is staged). Anything unexpected only means the pages are compared as usual.
  void DeclareUnwrittenPages(const std::vector<RamBlockInfo>& blocks) {
    if (qemu_pid_ <= 0) {
      note_ = "QEMU's pid is unknown (not a QMP socket of its own)";
      return;
    }
    auto mappings = ReadProcessMappings(qemu_pid_);
    if (!mappings) {
      note_ = mappings.error().message();
      return;
    }
    for (uint32_t i = 0; i < blocks.size(); ++i) {
      auto m = FindPrivateFileMapping(*mappings, blocks[i].used_length);
      if (!m) continue;
      auto is_parent = options_.is_parent_image(m->path, blocks[i].name);
      if (!is_parent || !*is_parent) {
        note_ = m->path + " is not the parent's image of " + blocks[i].name +
                (is_parent ? "" : ": " + is_parent.error().message());
        continue;
      }
      auto unwritten = UnwrittenPagesOfPrivateFileMapping(qemu_pid_, m->start, blocks[i].used_length / kPage);
      if (!unwritten) {
        note_ = unwritten.error().message();
        continue;
      }
      const std::vector<bool>& u = *unwritten;
      uint64_t declared = 0;
      for (uint64_t p = 0; p < u.size();) {
        if (!u[p]) {
          ++p;
          continue;
        }
        uint64_t q = p;
        while (q < u.size() && u[q]) ++q;
        if (Status s = writer_->DeclareInParent(i, p, q - p); !s.ok()) {
          note_ = s.message();
          return;
        }
        declared += q - p;
        p = q;
      }
      image_ = m->path;
      unwritten_pages_ += declared;
    }
  }
  void set_qemu_pid(int pid) { qemu_pid_ = pid; }
  const std::string& parent_image() const { return image_; }
  uint64_t unwritten_pages() const { return unwritten_pages_; }
  const std::string& parent_image_note() const { return note_; }

  // Called once, before the first page is handled (QEMU has captured the guest by then).
  void set_on_first_page(std::function<Status()> f) { on_first_page_ = std::move(f); }

  Status OnPage(const PageRecord& r) override {
    if (on_first_page_) {
      const std::function<Status()> f = std::move(on_first_page_);
      on_first_page_ = nullptr;
      HLT_RETURN_IF_ERROR(f());
    }
    HLT_RETURN_IF_ERROR(WriterReady());
    const PageRef where{r.id.block, r.id.page};
    const uint8_t* data = r.data;
    std::array<uint8_t, kPage> filled;
    const std::vector<uint8_t>* at_instant = r.id.block < at_instant_.size() ? at_instant_[r.id.block] : nullptr;
    if (at_instant != nullptr && (r.id.page + 1) * kPage <= at_instant->size()) {
      data = at_instant->data() + r.id.page * kPage;
    } else if (r.is_zero && r.fill != 0) {
      filled.fill(r.fill);
      data = filled.data();
    }
    if (data == nullptr || IsAllZero(std::span<const uint8_t>(data, kPage))) {
      ++zero_pages_;
      if (zero_run_.count && zero_run_.first.region == where.region &&
          zero_run_.first.page + zero_run_.count == where.page) {
        ++zero_run_.count;
      } else {
        HLT_RETURN_IF_ERROR(FlushZeroRun());
        zero_run_ = halite::PageRun{where, 1, 0};
      }
    } else {
      ++data_pages_;
      HLT_RETURN_IF_ERROR(FlushZeroRun());
      const std::span<const uint8_t, kPage> page(data, kPage);
      HLT_RETURN_IF_ERROR(writer_->PutPage(where.region, where.page, page));
      if (options_.va_walk) candidates_.Observe(where, page);
    }
    if (r.out_of_scan_order) {
      if (!trace_.empty() && trace_.back().first.region == where.region &&
          trace_.back().first.page + trace_.back().count == where.page) {
        ++trace_.back().count;
      } else {
        trace_.push_back(halite::PageRun{where, 1, 0});
      }
      ++trace_pages_;
    }
    return Status::Ok();
  }

  Status FlushZeroRun() {
    if (zero_run_.count == 0) return Status::Ok();
    Status s = writer_->PutZeroPages(zero_run_.first.region, zero_run_.first.page, zero_run_.count);
    zero_run_.count = 0;
    return s;
  }

  std::unique_ptr<CheckpointWriter> TakeWriter() { return std::move(writer_); }
  const std::vector<x86::GuestMemoryRange>& memory_map() const { return memory_map_; }
  const x86::TopLevelTableCandidates& candidates() const { return candidates_; }
  const std::vector<halite::PageRun>& trace() const { return trace_; }
  uint64_t trace_pages() const { return trace_pages_; }
  uint64_t data_pages() const { return data_pages_; }
  uint64_t zero_pages() const { return zero_pages_; }
  const std::vector<std::string>& blocks_from_instant() const { return blocks_from_instant_; }

 private:
  const std::string& path_;
  const CheckpointSaveOptions& options_;
  const std::vector<RamBlockInfo>& qmp_blocks_;
  const std::vector<GuestRamRange>& ram_ranges_;
  std::string machine_type_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::future<Status> writer_made_;
  Status writer_status_;
  std::vector<x86::GuestMemoryRange> memory_map_;
  x86::TopLevelTableCandidates candidates_;
  halite::PageRun zero_run_{PageRef{}, 0, 0};
  std::vector<halite::PageRun> trace_;
  uint64_t trace_pages_ = 0;
  uint64_t data_pages_ = 0, zero_pages_ = 0;
  int qemu_pid_ = -1;
  std::function<Status()> on_first_page_;
  std::vector<const std::vector<uint8_t>*> at_instant_;  // per RAMBlock: its content at the instant, or null
  std::vector<std::string> blocks_from_instant_;
  std::string image_, note_;
  uint64_t unwritten_pages_ = 0;
};

// How this save stops and starts the guest (the caller's way, a management layer that must know, or QMP), and
// whether the guest is stopped by us now, so that a failure resumes it. Also the saved instant
// (CheckpointSaveOptions::at_snapshot_instant) and, for a live save, the pause around it.
class GuestControl {
 public:
  GuestControl(QmpClient& qmp, const CheckpointSaveOptions& options, LivePauseReport* report)
      : qmp_(qmp), options_(options), report_(*report) {}

  Status Pause() {
    HLT_RETURN_IF_ERROR(options_.pause_guest ? options_.pause_guest() : qmp_.Execute("stop").status());
    stopped_ = true;
    stopped_at_ = Clock::now();
    return Status::Ok();
  }
  Status Resume() {
    HLT_RETURN_IF_ERROR(options_.resume_guest ? options_.resume_guest() : qmp_.Execute("cont").status());
    stopped_ = false;
    return Status::Ok();
  }
  // The access window left the guest stopped for the save.
  void NoteStopped() {
    stopped_ = true;
    stopped_at_ = Clock::now();
  }
  Status ResumeAfterFailure(Status s) {
    if (stopped_) (void)Resume();
    return s;
  }
  bool stopped() const { return stopped_; }
  Clock::time_point stopped_at() const { return stopped_at_; }

  // Whether a live save pauses the guest for its saved instant.
  bool live_pause() const { return options_.live && options_.at_snapshot_instant != nullptr; }

  // Right before `migrate` (QEMU has the channel already): the saved instant; a live save pauses the guest for it.
  Status AtSnapshotInstant() {
    if (!options_.at_snapshot_instant) return Status::Ok();
    if (!live_pause()) return options_.at_snapshot_instant();
    (void)qmp_.TakeEvents();  // older STOP and RESUME events (the access window's) are not this pause's
    pause_start_ = Clock::now();
    HLT_RETURN_IF_ERROR(Pause());
    const auto paused = Clock::now();
    Status s = options_.at_snapshot_instant();
    migrate_at_ = Clock::now();
    report_.paused = true;
    report_.pause_ms = Ms(pause_start_, paused);
    report_.instant_ms = Ms(paused, migrate_at_);
    return s;
  }
  // QEMU's first page: the guest is captured, it may run again.
  Status OnCaptured() {
    const auto captured = Clock::now();
    Status s = Resume();
    const auto resumed = Clock::now();
    report_.capture_ms = Ms(migrate_at_, captured);
    report_.resume_ms = Ms(captured, resumed);
    report_.total_ms = Ms(pause_start_, resumed);
    return s;
  }
  // After the stream: how long the vCPUs stood still in the pause, from QEMU's own STOP and RESUME events (its
  // timestamps). QEMU 7.2 starts them itself a little before the resume call returns.
  void MeasureVcpuPause() {
    if (!report_.paused) return;
    auto events = qmp_.TakeEvents();
    if (!events) return;
    int64_t stop_us = -1;
    for (const QmpEvent& e : *events) {
      if (e.name == "STOP" && stop_us < 0) stop_us = e.host_time_us;
      if (e.name == "RESUME" && stop_us >= 0 && e.host_time_us >= stop_us) {
        report_.vcpus_stopped_ms = double(e.host_time_us - stop_us) / 1000;
        return;
      }
    }
  }

 private:
  QmpClient& qmp_;
  const CheckpointSaveOptions& options_;
  LivePauseReport& report_;
  bool stopped_ = false;
  Clock::time_point stopped_at_, pause_start_, migrate_at_;
};

// QEMU throttles migration to max-bandwidth (128 MiB/s by default): for a stopped guest that is downtime, for a
// live one a longer save. Lifted for one save, put back afterwards.
class LiftedBandwidth {
 public:
  explicit LiftedBandwidth(QmpClient& qmp) : qmp_(qmp) {
    if (auto params = qmp_.Execute("query-migrate-parameters"); params) {
      if (const Json* bw = FindMember(*params, "max-bandwidth")) old_ = AsInt(*bw);
    }
    if (old_) (void)qmp_.Execute("migrate-set-parameters", Json::object({{"max-bandwidth", int64_t{1} << 40}}));
  }
  ~LiftedBandwidth() {
    if (old_) (void)qmp_.Execute("migrate-set-parameters", Json::object({{"max-bandwidth", *old_}}));
  }

 private:
  QmpClient& qmp_;
  std::optional<int64_t> old_;
};

// After the stream: the device state, the access hints and the page-table walk's hints into the writer.
Status AddStateAndHints(CheckpointWriter& writer, const SavedVmState& state, const CheckpointStreamHandler& handler,
                        const AccessWindow& window, const std::vector<CpuPagingRegisters>& cpus,
                        const std::string& guest_info_note, const CheckpointSaveOptions& options,
                        CheckpointSaveResult* result) {
  const std::string blob = EncodeSavedVmState(state);
  result->state_blob_bytes = blob.size();
  HLT_RETURN_IF_ERROR(writer.AddBlob(
      kQemuStateBlobName, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(blob.data()), blob.size())));
  if (!window.samples.empty() && !handler.memory_map().empty()) {
    const std::vector<halite::PageRun> touched = x86::AccessedPageRuns(window.samples, handler.memory_map());
    for (const auto& run : touched) result->access_window_pages += run.count;
    if (!touched.empty()) HLT_RETURN_IF_ERROR(writer.AddAccessedPages(touched));
  }
  if (options.live && options.live_access_trace && !handler.trace().empty()) {
    HLT_RETURN_IF_ERROR(writer.AddAccessedPages(handler.trace()));
    result->access_trace_pages = handler.trace_pages();
  }
  if (!options.va_walk) {
    result->va.skipped = "off";
  } else if (!guest_info_note.empty()) {
    result->va.skipped = "could not read the guest's memory map or registers: " + guest_info_note;
  } else if (handler.memory_map().empty()) {
    result->va.skipped = "info mtree -f shows none of the saved RAMBlocks in guest-physical memory";
  } else {
    std::vector<x86::VcpuControlRegisters> vcpus;
    for (const CpuPagingRegisters& c : cpus) vcpus.push_back({uint32_t(c.cpu), c.cr0, c.cr3, c.cr4, c.efer});
    HLT_ASSIGN_OR_RETURN(result->va, x86::AddPageTableHints(writer, vcpus, handler.memory_map(),
                                                            handler.candidates(), options.walk));
  }
  return Status::Ok();
}

}  // namespace

Result<CheckpointSaveResult> SaveQemuToCheckpoint(QmpClient& qmp, const std::string& path,
                                                  CheckpointSaveOptions options) {
  const auto t0 = Clock::now();
  CheckpointSaveResult result;
  result.live = options.live;
  // Fail before stopping anything when the checkpoint could not be written anyway. An object (s3://, rados://)
  // has no directory to check: its upload starts with the stream, and a failure there resumes the guest.
  const std::string dir = OutputDir(path);
  if (!IsObjectStoreUri(path) && ::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::IoError(path + ": cannot create files in " + dir, errno);
  }

  HLT_ASSIGN_OR_RETURN(Json status, qmp.Execute("query-status"));
  const Json* running = FindMember(status, "running");
  result.was_running = running != nullptr && AsBool(*running);
  if (const Json* st = FindMember(status, "status"); st != nullptr && AsString(*st) == "inmigrate") {
    return Status::InvalidArgument(qmp.name() + ": QEMU is waiting for an incoming migration: nothing to save");
  }
  if (options.live && !result.was_running) {
    // QEMU 7.2's background snapshot starts the vCPUs once it has captured the guest, stopped or not; a guest
    // that stands still is saved as well without it.
    options.live = false;
    result.live = false;
    result.live_note = "the guest was not running: saved as it stands, without a background snapshot";
  }
  HLT_ASSIGN_OR_RETURN(std::vector<RamBlockInfo> qmp_blocks, QueryRamBlocks(qmp));
  GuestControl guest(qmp, options, &result.live_pause);

  // Where RAM is in guest-physical memory: for the access window and the page-table walk.
  std::vector<GuestRamRange> ram_ranges;
  std::string guest_info_note;
  const bool sample_accesses = result.was_running && options.access_window.window_ms > 0;
  const bool live_and_running = options.live && result.was_running;
  if (options.va_walk || sample_accesses || live_and_running) {
    auto ranges = QueryGuestRamMap(qmp);
    if (ranges) {
      ram_ranges = std::move(*ranges);
    } else {
      guest_info_note = ranges.error().message();
    }
  }

  AccessWindow window;
  window.report.skipped = !result.was_running ? "the guest is not running" : "off";
  if (sample_accesses && guest_info_note.empty()) {
    AccessWindowOptions wo = options.access_window;
    wo.leave_stopped = !options.live;  // a stopped-guest save stops it next anyway
    wo.pause_guest = [&] { return options.pause_guest ? options.pause_guest() : qmp.Execute("stop").status(); };
    wo.resume_guest = [&] { return options.resume_guest ? options.resume_guest() : qmp.Execute("cont").status(); };
    HLT_ASSIGN_OR_RETURN(window, SampleGuestAccesses(qmp, qmp.PeerPid(), ram_ranges, wo));
    if (window.left_stopped) guest.NoteStopped();
  }
  result.access_window = window.report;
  if (!options.live && result.was_running && !guest.stopped()) HLT_RETURN_IF_ERROR(guest.Pause());
  // The vCPUs' registers for the page-table walk, read while the guest is stopped (or just before a live
  // snapshot).
  std::vector<CpuPagingRegisters> cpus;
  if (options.va_walk && guest_info_note.empty()) {
    auto regs = QueryCpuPagingRegisters(qmp);
    if (regs) {
      cpus = std::move(*regs);
    } else {
      guest_info_note = regs.error().message();
    }
  }

  // A live save's pause holds QEMU's setup of its background snapshot, whose cost grows 512-fold for RAM that an
  // earlier live save left in 4 KiB pages: gathered back into huge pages first, while the guest runs.
  if (live_and_running) {
    result.thp_regather = RegatherHugePages(qmp.PeerPid(), GuestRamHostRanges(qmp, qmp_blocks, ram_ranges));
  }
  LiftedBandwidth lifted_bandwidth(qmp);
  CheckpointStreamHandler handler(path, options, qmp_blocks, ram_ranges);
  handler.set_qemu_pid(qmp.PeerPid());
  if (guest.live_pause()) handler.set_on_first_page([&] { return guest.OnCaptured(); });
  SaveOptions so;
  so.before_migrate = [&] { return guest.AtSnapshotInstant(); };
  so.live = options.live;
  so.then = SaveOptions::Then::kLeaveStopped;  // resumed below, by us
  so.timeout_ms = options.timeout_ms;
  so.reader.stream_name = qmp.name() + " migration stream";
  so.reader.record_arrival_order = false;
  const auto stream_start = Clock::now();
  auto state = SaveFromQemu(qmp, handler, so, &result.save);
  result.stream_seconds = Since(stream_start);
  if (!state) return guest.ResumeAfterFailure(state.error());
  guest.MeasureVcpuPause();
  Status s = handler.WriterReady();
  if (s.ok()) s = handler.FlushZeroRun();
  if (!s.ok()) return guest.ResumeAfterFailure(s);
  result.was_running = result.was_running || result.save.was_running;

  // The stream is complete: the guest may go on while the checkpoint is compressed.
  using Then = SaveOptions::Then;
  if (options.then == Then::kContinue && guest.stopped()) {
    const auto stopped_at = guest.stopped_at();
    HLT_RETURN_IF_ERROR(guest.Resume());
    result.guest_stopped_seconds = Since(stopped_at);
  } else if (options.then == Then::kLeaveStopped && options.live && result.was_running) {
    HLT_RETURN_IF_ERROR(guest.Pause());
  }
  std::unique_ptr<CheckpointWriter> writer = handler.TakeWriter();
  result.machine_type = state->machine_type;
  result.blocks = state->ram_blocks.size();
  result.data_pages = handler.data_pages();
  result.zero_pages = handler.zero_pages();
  result.parent_image = handler.parent_image();
  result.parent_image_unwritten_pages = handler.unwritten_pages();
  result.parent_image_note = handler.parent_image_note();
  result.blocks_from_instant = handler.blocks_from_instant();
  HLT_RETURN_IF_ERROR(AddStateAndHints(*writer, *state, handler, window, cpus, guest_info_note, options, &result));
  if (options.before_finish) HLT_RETURN_IF_ERROR(options.before_finish(*writer));
  HLT_ASSIGN_OR_RETURN(result.summary, writer->Finish());
  if (options.then == Then::kQuit) {
    // Only now that the checkpoint exists. QEMU closes the monitor as it quits: a lost reply is fine.
    (void)qmp.Execute("quit", Json(), 5000);
  }
  result.total_seconds = Since(t0);
  return result;
}

}  // namespace halite::qemu
