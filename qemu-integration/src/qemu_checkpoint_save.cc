// QEMU -> checkpoint (halite/qemu/qemu_checkpoint.h): the stream goes into the writer as it arrives; then the
// page-table hints (read back from the writer), the device state, Finish.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

#include "halite/checkpoint_location.h"
#include "halite/page_util.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_ram_mapping.h"
#include "halite/qemu/qemu_guest_info.h"
#include "halite/qemu/qemu_migration_control.h"
#include "halite/x86_guest_hints.h"

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

  Status OnRamBlocks(const std::vector<RamBlockInfo>& blocks) override {
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

  Status OnPage(const PageRecord& r) override {
    const PageRef where{r.id.block, r.id.page};
    const uint8_t* data = r.data;
    std::array<uint8_t, kPage> filled;
    if (r.is_zero && r.fill != 0) {
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

  CheckpointWriter* writer() { return writer_.get(); }
  std::unique_ptr<CheckpointWriter> TakeWriter() { return std::move(writer_); }
  const std::vector<x86::GuestMemoryRange>& memory_map() const { return memory_map_; }
  const x86::TopLevelTableCandidates& candidates() const { return candidates_; }
  const std::vector<halite::PageRun>& trace() const { return trace_; }
  uint64_t trace_pages() const { return trace_pages_; }
  uint64_t data_pages() const { return data_pages_; }
  uint64_t zero_pages() const { return zero_pages_; }

 private:
  const std::string& path_;
  const CheckpointSaveOptions& options_;
  const std::vector<RamBlockInfo>& qmp_blocks_;
  const std::vector<GuestRamRange>& ram_ranges_;
  std::string machine_type_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::vector<x86::GuestMemoryRange> memory_map_;
  x86::TopLevelTableCandidates candidates_;
  halite::PageRun zero_run_{PageRef{}, 0, 0};
  std::vector<halite::PageRun> trace_;
  uint64_t trace_pages_ = 0;
  uint64_t data_pages_ = 0, zero_pages_ = 0;
  int qemu_pid_ = -1;
  std::string image_, note_;
  uint64_t unwritten_pages_ = 0;
};

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
  const Json* running = status.Find("running");
  result.was_running = running != nullptr && running->as_bool();
  if (const Json* st = status.Find("status"); st != nullptr && st->as_string() == "inmigrate") {
    return Status::InvalidArgument(qmp.name() + ": QEMU is waiting for an incoming migration: nothing to save");
  }
  HLT_ASSIGN_OR_RETURN(std::vector<RamBlockInfo> qmp_blocks, QueryRamBlocks(qmp));

  // How the guest is paused and resumed: the caller's way (a management layer that must know), or QMP.
  auto pause = [&]() -> Status {
    return options.pause_guest ? options.pause_guest() : qmp.Execute("stop").status();
  };
  auto resume = [&]() -> Status {
    return options.resume_guest ? options.resume_guest() : qmp.Execute("cont").status();
  };
  // Where RAM is in guest-physical memory: for the access window and the page-table walk.
  std::vector<GuestRamRange> ram_ranges;
  std::string guest_info_note;
  const bool sample_accesses = result.was_running && options.access_window.window_ms > 0;
  if (options.va_walk || sample_accesses) {
    auto ranges = QueryGuestRamMap(qmp);
    if (ranges) {
      ram_ranges = std::move(*ranges);
    } else {
      guest_info_note = ranges.error().message();
    }
  }

  bool stopped_by_us = false;
  Clock::time_point stopped_at;
  AccessWindow window;
  window.report.skipped = !result.was_running ? "the guest is not running" : "off";
  if (sample_accesses && guest_info_note.empty()) {
    AccessWindowOptions wo = options.access_window;
    wo.leave_stopped = !options.live;  // a stopped-guest save stops it next anyway
    wo.pause_guest = pause;
    wo.resume_guest = resume;
    HLT_ASSIGN_OR_RETURN(window, SampleGuestAccesses(qmp, qmp.PeerPid(), ram_ranges, wo));
    if (window.left_stopped) {
      stopped_by_us = true;
      stopped_at = Clock::now();
    }
  }
  result.access_window = window.report;
  if (!options.live && result.was_running && !stopped_by_us) {
    HLT_RETURN_IF_ERROR(pause());
    stopped_by_us = true;
    stopped_at = Clock::now();
  }
  auto resume_after_failure = [&](Status s) -> Status {
    if (stopped_by_us) (void)resume();
    return s;
  };
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

  // QEMU throttles migration to max-bandwidth (128 MiB/s by default): for a stopped guest that is downtime, for a
  // live one a longer save. Lift it for this save and put it back afterwards.
  std::optional<int64_t> old_bandwidth;
  if (auto params = qmp.Execute("query-migrate-parameters"); params) {
    if (const Json* bw = params->Find("max-bandwidth")) old_bandwidth = bw->as_int();
  }
  if (old_bandwidth) (void)qmp.Execute("migrate-set-parameters", Json::Obj({{"max-bandwidth", int64_t{1} << 40}}));
  struct RestoreBandwidth {
    QmpClient& q;
    std::optional<int64_t> v;
    ~RestoreBandwidth() {
      if (v) (void)q.Execute("migrate-set-parameters", Json::Obj({{"max-bandwidth", *v}}));
    }
  } restore_bandwidth{qmp, old_bandwidth};

  CheckpointStreamHandler handler(path, options, qmp_blocks, ram_ranges);
  handler.set_qemu_pid(qmp.PeerPid());
  SaveOptions so;
  so.live = options.live;
  so.then = SaveOptions::Then::kLeaveStopped;  // resumed below, by us
  so.timeout_ms = options.timeout_ms;
  so.reader.stream_name = qmp.name() + " migration stream";
  so.reader.record_arrival_order = false;
  const auto stream_start = Clock::now();
  auto state = SaveFromQemu(qmp, handler, so, &result.save);
  result.stream_seconds = Since(stream_start);
  if (!state) return resume_after_failure(state.error());
  Status s = handler.writer() ? handler.FlushZeroRun() : Status::Internal("the stream had no RAM section");
  if (!s.ok()) return resume_after_failure(s);
  result.was_running = result.was_running || result.save.was_running;

  // The stream is complete: the guest may go on while the checkpoint is compressed.
  using Then = SaveOptions::Then;
  if (options.then == Then::kContinue && stopped_by_us) {
    HLT_RETURN_IF_ERROR(resume());
    result.guest_stopped_seconds = std::chrono::duration<double>(Clock::now() - stopped_at).count();
    stopped_by_us = false;
  } else if (options.then == Then::kLeaveStopped && options.live && result.was_running) {
    HLT_RETURN_IF_ERROR(pause());
  }
  std::unique_ptr<CheckpointWriter> writer = handler.TakeWriter();
  result.machine_type = state->machine_type;
  result.blocks = state->ram_blocks.size();
  result.data_pages = handler.data_pages();
  result.zero_pages = handler.zero_pages();
  result.parent_image = handler.parent_image();
  result.parent_image_unwritten_pages = handler.unwritten_pages();
  result.parent_image_note = handler.parent_image_note();

  const std::string blob = EncodeSavedVmState(*state);
  result.state_blob_bytes = blob.size();
  HLT_RETURN_IF_ERROR(writer->AddBlob(
      kQemuStateBlobName, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(blob.data()), blob.size())));
  if (!window.samples.empty() && !handler.memory_map().empty()) {
    const std::vector<halite::PageRun> touched = x86::AccessedPageRuns(window.samples, handler.memory_map());
    for (const auto& run : touched) result.access_window_pages += run.count;
    if (!touched.empty()) HLT_RETURN_IF_ERROR(writer->AddAccessedPages(touched));
  }
  if (options.live && options.live_access_trace && !handler.trace().empty()) {
    HLT_RETURN_IF_ERROR(writer->AddAccessedPages(handler.trace()));
    result.access_trace_pages = handler.trace_pages();
  }
  if (!options.va_walk) {
    result.va.skipped = "off";
  } else if (!guest_info_note.empty()) {
    result.va.skipped = "could not read the guest's memory map or registers: " + guest_info_note;
  } else if (handler.memory_map().empty()) {
    result.va.skipped = "info mtree -f shows none of the saved RAMBlocks in guest-physical memory";
  } else {
    std::vector<x86::VcpuControlRegisters> vcpus;
    for (const CpuPagingRegisters& c : cpus) vcpus.push_back({uint32_t(c.cpu), c.cr0, c.cr3, c.cr4, c.efer});
    HLT_ASSIGN_OR_RETURN(result.va,
                         x86::AddPageTableHints(*writer, vcpus, handler.memory_map(), handler.candidates(), options.walk));
  }
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
