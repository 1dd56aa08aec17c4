// QEMU -> checkpoint (halite/qemu/qemu_checkpoint.h): the stream goes into the writer as it arrives; what the
// page-table walk needs is kept on the side; hints and the device state follow; then Finish.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>

#include "halite/page_util.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_guest_info.h"
#include "halite/qemu/qemu_migration_control.h"

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr uint64_t kPage = kTargetPageSize;

// Could this page be a page table of any level? Every entry is either not present (any content: Linux keeps swap
// and PROT_NONE entries there) or present and naming a frame below 2^46 (bits 46..51 clear); one at least is
// present. A page of random data passes with probability ~(1/2 + 1/128)^512.
bool MayBePageTable(const uint8_t* p) {
  bool present = false;
  for (size_t i = 0; i < kPage; i += 8) {
    uint64_t e;
    std::memcpy(&e, p + i, 8);
    if (!(e & 1)) continue;
    if (e & 0x000fc00000000000ull) return false;
    present = true;
  }
  return present;
}

std::string OutputDir(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// Guest-physical frames <-> (block, page), from `info mtree -f`, restricted to the saved blocks.
class RamMap {
 public:
  struct Range {
    uint64_t first_pfn, pages;
    uint32_t block;
    uint64_t first_page;  // within the block
  };

  void Build(const std::vector<GuestRamRange>& ranges, const std::vector<RamBlockInfo>& blocks) {
    ranges_.clear();
    for (const auto& r : ranges) {
      int b = -1;
      for (size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i].name == r.block) b = int(i);
      }
      if (b < 0 || r.gpa % kPage || r.size % kPage || r.offset % kPage) continue;
      const uint64_t block_pages = blocks[b].page_count();
      uint64_t first_page = r.offset / kPage, pages = r.size / kPage;
      if (first_page >= block_pages) continue;
      pages = std::min(pages, block_pages - first_page);
      ranges_.push_back(Range{r.gpa / kPage, pages, uint32_t(b), first_page});
    }
    std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.first_pfn < b.first_pfn; });
    by_block_ = ranges_;
    std::sort(by_block_.begin(), by_block_.end(), [](const Range& a, const Range& b) {
      return a.block != b.block ? a.block < b.block : a.first_page < b.first_page;
    });
  }
  bool empty() const { return ranges_.empty(); }
  uint64_t max_pfn() const {
    uint64_t m = 0;
    for (const auto& r : ranges_) m = std::max(m, r.first_pfn + r.pages - 1);
    return m;
  }
  // The range holding `pfn`, or nullptr.
  const Range* Find(uint64_t pfn) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), pfn,
                               [](uint64_t v, const Range& r) { return v < r.first_pfn; });
    if (it == ranges_.begin()) return nullptr;
    --it;
    return pfn < it->first_pfn + it->pages ? &*it : nullptr;
  }
  // The guest frame showing (block, page), lowest first; false when the page is not mapped.
  bool PfnOf(uint32_t block, uint64_t page, uint64_t* pfn) const {
    for (const auto& r : by_block_) {
      if (r.block == block && page >= r.first_page && page < r.first_page + r.pages) {
        *pfn = r.first_pfn + (page - r.first_page);
        return true;
      }
    }
    return false;
  }
  const std::vector<Range>& ranges() const { return ranges_; }

 private:
  std::vector<Range> ranges_;    // by guest frame
  std::vector<Range> by_block_;  // by (block, page)
};

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
    blocks_ = blocks;
    WriterOptions wo = options_.writer;
    wo.metadata.vmm_kind = VmmKind::kQemu;
    wo.metadata.machine_type = machine_type_;
    if (wo.metadata.creator.empty()) wo.metadata.creator = "libhalite hlt-save qemu";
    HLT_ASSIGN_OR_RETURN(writer_, CheckpointWriter::Create(path_, std::move(wo)));
    map_.Build(ram_ranges_, blocks);
    uint64_t total = 0;
    for (uint32_t i = 0; i < blocks.size(); ++i) {
      uint32_t host_page = 4096;
      for (const auto& q : qmp_blocks_) {
        if (q.name == blocks[i].name && q.page_size != 0) host_page = uint32_t(q.page_size);
      }
      uint64_t base = 0;
      uint64_t pfn = 0;
      if (map_.PfnOf(i, 0, &pfn)) base = pfn * kPage;
      HLT_ASSIGN_OR_RETURN(uint32_t region, writer_->AddRegion(blocks[i].name, base, blocks[i].used_length, host_page));
      if (region != i)
        return Status::Internal("region index " + std::to_string(region) + " for block " + std::to_string(i));
      nonzero_.emplace_back((blocks[i].page_count() + 63) / 64, 0);
      total += blocks[i].used_length;
    }
    cache_limit_ =
        options_.max_table_cache_bytes ? options_.max_table_cache_bytes : std::max<uint64_t>(64ull << 20, total / 16);
    max_pfn_ = map_.max_pfn();
    return Status::Ok();
  }

  Status OnPage(const PageRecord& r) override {
    const uint32_t region = r.id.block;
    const uint64_t page = r.id.page;
    const uint8_t* data = r.data;
    std::array<uint8_t, kPage> filled;
    if (r.is_zero && r.fill != 0) {
      filled.fill(r.fill);
      data = filled.data();
    }
    const bool zero = data == nullptr || IsAllZero(std::span<const uint8_t>(data, kPage));
    uint64_t& word = nonzero_[region][page / 64];
    const uint64_t bit = uint64_t{1} << (page % 64);
    if (zero) {
      word &= ~bit;
      ++zero_pages_;
      if (zero_run_.count && zero_run_.first.region == region && zero_run_.first.page + zero_run_.count == page) {
        ++zero_run_.count;
      } else {
        HLT_RETURN_IF_ERROR(FlushZeroRun());
        zero_run_ = halite::PageRun{PageRef{region, page}, 1, 0};
      }
      if (r.duplicate) cache_.erase(Key(region, page));
    } else {
      word |= bit;
      ++data_pages_;
      HLT_RETURN_IF_ERROR(FlushZeroRun());
      HLT_RETURN_IF_ERROR(writer_->PutPage(region, page, std::span<const uint8_t>(data, kPage)));
      if (options_.va_walk) KeepForWalk(region, page, data, r.duplicate);
    }
    if (r.out_of_scan_order) {
      if (!trace_.empty() && trace_.back().first.region == region &&
          trace_.back().first.page + trace_.back().count == page) {
        ++trace_.back().count;
      } else {
        trace_.push_back(halite::PageRun{PageRef{region, page}, 1, 0});
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

  // The walker's view of guest memory: frames -> the kept copies; zero pages read as zero; anything else is
  // "not there" (counted by the walker as a missing table).
  Result<bool> ReadGuestPage(uint64_t pfn, std::span<uint8_t, kPage> out) const {
    const RamMap::Range* r = map_.Find(pfn);
    if (r == nullptr) return false;
    const uint32_t block = r->block;
    const uint64_t page = r->first_page + (pfn - r->first_pfn);
    auto it = cache_.find(Key(block, page));
    if (it != cache_.end()) {
      std::memcpy(out.data(), it->second.get(), kPage);
      return true;
    }
    if (!((nonzero_[block][page / 64] >> (page % 64)) & 1)) {
      std::memset(out.data(), 0, kPage);
      return true;
    }
    return false;
  }
  bool NonZero(uint32_t block, uint64_t page) const { return (nonzero_[block][page / 64] >> (page % 64)) & 1; }

  CheckpointWriter* writer() { return writer_.get(); }
  std::unique_ptr<CheckpointWriter> TakeWriter() { return std::move(writer_); }
  const std::vector<RamBlockInfo>& blocks() const { return blocks_; }
  const RamMap& map() const { return map_; }
  uint64_t max_pfn() const { return max_pfn_; }
  const std::vector<uint64_t>& candidates() const { return candidates_; }
  uint64_t cached_pages() const { return cache_.size(); }
  bool cache_full() const { return cache_full_; }
  const std::vector<halite::PageRun>& trace() const { return trace_; }
  uint64_t trace_pages() const { return trace_pages_; }
  uint64_t data_pages() const { return data_pages_; }
  uint64_t zero_pages() const { return zero_pages_; }
  uint64_t nonzero_pages() const {
    uint64_t n = 0;
    for (const auto& v : nonzero_) {
      for (uint64_t w : v) n += uint64_t(__builtin_popcountll(w));
    }
    return n;
  }

 private:
  static uint64_t Key(uint32_t block, uint64_t page) { return uint64_t(block) << 40 | page; }

  void KeepForWalk(uint32_t block, uint64_t page, const uint8_t* data, bool duplicate) {
    const uint64_t key = Key(block, page);
    if (!MayBePageTable(data)) {
      if (duplicate) cache_.erase(key);
      return;
    }
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      if ((cache_.size() + 1) * kPage > cache_limit_) {
        cache_full_ = true;
        return;
      }
      it = cache_.emplace(key, std::make_unique<uint8_t[]>(kPage)).first;
    }
    std::memcpy(it->second.get(), data, kPage);
    uint64_t pfn = 0;
    if (map_.PfnOf(block, page, &pfn) &&
        x86::LooksLikeTopLevelTable(std::span<const uint8_t, kPage>(data, kPage), max_pfn_)) {
      candidates_.push_back(pfn);
    }
  }

  const std::string& path_;
  const CheckpointSaveOptions& options_;
  const std::vector<RamBlockInfo>& qmp_blocks_;
  const std::vector<GuestRamRange>& ram_ranges_;
  std::string machine_type_;
  std::vector<RamBlockInfo> blocks_;
  std::unique_ptr<CheckpointWriter> writer_;
  RamMap map_;
  uint64_t max_pfn_ = 0;
  std::vector<std::vector<uint64_t>> nonzero_;
  std::unordered_map<uint64_t, std::unique_ptr<uint8_t[]>> cache_;
  uint64_t cache_limit_ = 0;
  bool cache_full_ = false;
  std::vector<uint64_t> candidates_;
  halite::PageRun zero_run_{PageRef{}, 0, 0};
  std::vector<halite::PageRun> trace_;
  uint64_t trace_pages_ = 0;
  uint64_t data_pages_ = 0, zero_pages_ = 0;
};

// Walks the guest's page tables over what the handler kept and gives the writer VA runs.
Status WalkAndHint(const CheckpointStreamHandler& h, const std::vector<CpuPagingRegisters>& cpus,
                   const CheckpointSaveOptions& options, CheckpointWriter& writer, QemuVaReport* va) {
  const auto start = Clock::now();
  va->vcpus = uint32_t(cpus.size());
  va->candidates = h.candidates().size();
  va->cached_pages = h.cached_pages();
  va->cache_full = h.cache_full();
  va->nonzero_pages = h.nonzero_pages();
  if (h.map().empty()) {
    va->skipped = "info mtree -f shows none of the saved RAMBlocks in guest-physical memory";
    return Status::Ok();
  }
  std::vector<x86::PagingRoot> roots;
  for (const auto& c : cpus) {
    auto root = x86::PagingRootFromRegisters(c.cr0, c.cr3, c.cr4, c.efer);
    if (!root) {
      if (!va->notes.empty()) va->notes += "; ";
      va->notes += "CPU " + std::to_string(c.cpu) + ": " + root.error().message();
      continue;
    }
    roots.push_back(*root);
  }
  if (roots.empty()) {
    va->skipped = "no vCPU is in 64-bit paging mode" + (va->notes.empty() ? std::string() : " (" + va->notes + ")");
    return Status::Ok();
  }
  x86::GuestWalkOptions wo = options.walk;
  wo.limits.max_pfn = h.max_pfn();
  x86::GuestPageReader read = [&h](uint64_t pfn, std::span<uint8_t, x86::kGuestPageSize> out) {
    return h.ReadGuestPage(pfn, out);
  };
  auto walk = x86::WalkGuestAddressSpaces(read, roots, h.candidates(), wo);
  if (!walk) {
    if (walk.error().code() == StatusCode::kNotFound) {
      va->skipped = "the vCPUs' page-table roots were not kept: " + walk.error().message();
      return Status::Ok();
    }
    return walk.error();
  }
  va->cpu_roots = walk->cpu_roots;
  va->pti_kernel_copies = walk->pti_kernel_copies;
  va->scan_roots = uint32_t(walk->scan.roots.size());
  va->truncated = walk->truncated;

  // Walks are in guest-physical frames. Translate them into a space where every block is one contiguous range
  // (block i at the sum of the earlier blocks' sizes), so the library's ToPageRuns maps them onto the regions.
  const auto& blocks = h.blocks();
  std::vector<uint64_t> synth_base(blocks.size());
  std::vector<Region> synth;
  uint64_t next = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    synth_base[i] = next;
    Region r;
    r.name = blocks[i].name;
    r.guest_phys_base = next * kPage;
    r.size = blocks[i].used_length;
    synth.push_back(r);
    next += blocks[i].page_count();
  }
  std::vector<x86::AddressSpaceWalk> spaces;
  for (const auto& space : walk->spaces) {
    va->table_pages += space.stats.tables;
    va->missing_tables += space.stats.missing_tables;
    va->truncated = va->truncated || space.stats.truncated;
    va->runs += space.runs.size();
    x86::AddressSpaceWalk t = space;
    t.runs.clear();
    for (const x86::VaRun& run : space.runs) {
      uint64_t pfn = run.pfn, pages = run.pages, vaddr = run.va;
      while (pages > 0) {
        const RamMap::Range* r = h.map().Find(pfn);
        uint64_t take = 1;
        if (r != nullptr) {
          take = std::min(pages, r->first_pfn + r->pages - pfn);
          x86::VaRun piece = run;
          piece.va = vaddr;
          piece.pfn = synth_base[r->block] + r->first_page + (pfn - r->first_pfn);
          piece.pages = take;
          t.runs.push_back(piece);
        } else {
          // Not RAM (MMIO, a hole): skip to the next RAM range or the end of the run.
          auto& rs = h.map().ranges();
          auto it = std::upper_bound(rs.begin(), rs.end(), pfn,
                                     [](uint64_t v, const RamMap::Range& x) { return v < x.first_pfn; });
          take = it == rs.end() ? pages : std::min(pages, it->first_pfn - pfn);
        }
        pfn += take;
        vaddr += take * kPage;
        pages -= take;
      }
    }
    spaces.push_back(std::move(t));
  }
  std::vector<halite::PageRun> runs = x86::ToPageRuns(spaces, synth);
  va->hint_runs = runs.size();
  auto nonzero = [&](uint64_t spfn) {
    auto it = std::upper_bound(synth_base.begin(), synth_base.end(), spfn);
    const size_t b = size_t(it - synth_base.begin()) - 1;
    const uint64_t page = spfn - synth_base[b];
    return page < blocks[b].page_count() && h.NonZero(uint32_t(b), page);
  };
  va->mapped_nonzero_pages = x86::CountMappedPages(spaces, nonzero, true);
  va->mapped_nonzero_small_pages = x86::CountMappedPages(spaces, nonzero, false);
  if (!runs.empty()) HLT_RETURN_IF_ERROR(writer.AddVaRuns(runs));
  va->seconds = Since(start);
  return Status::Ok();
}

}  // namespace

Result<CheckpointSaveResult> SaveQemuToCheckpoint(QmpClient& qmp, const std::string& path,
                                                  CheckpointSaveOptions options) {
  const auto t0 = Clock::now();
  CheckpointSaveResult result;
  result.live = options.live;
  // Fail before stopping anything when the checkpoint could not be written anyway.
  const std::string dir = OutputDir(path);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return Status::IoError(path + ": cannot create files in " + dir, errno);

  HLT_ASSIGN_OR_RETURN(Json status, qmp.Execute("query-status"));
  const Json* running = status.Find("running");
  result.was_running = running != nullptr && running->as_bool();
  if (const Json* st = status.Find("status"); st != nullptr && st->as_string() == "inmigrate") {
    return Status::InvalidArgument(qmp.name() + ": QEMU is waiting for an incoming migration: nothing to save");
  }
  HLT_ASSIGN_OR_RETURN(std::vector<RamBlockInfo> qmp_blocks, QueryRamBlocks(qmp));

  bool stopped_by_us = false;
  Clock::time_point stopped_at;
  if (!options.live && result.was_running) {
    HLT_RETURN_IF_ERROR(qmp.Execute("stop").status());
    stopped_by_us = true;
    stopped_at = Clock::now();
  }
  auto resume_after_failure = [&](Status s) -> Status {
    if (stopped_by_us) (void)qmp.Execute("cont");
    return s;
  };
  // The inputs of the page-table walk, read while the guest is stopped (or just before a live snapshot).
  std::vector<GuestRamRange> ram_ranges;
  std::vector<CpuPagingRegisters> cpus;
  std::string guest_info_note;
  if (options.va_walk) {
    auto ranges = QueryGuestRamMap(qmp);
    auto regs = QueryCpuPagingRegisters(qmp);
    if (ranges && regs) {
      ram_ranges = std::move(*ranges);
      cpus = std::move(*regs);
    } else {
      guest_info_note = !ranges ? ranges.error().message() : regs.error().message();
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
    HLT_RETURN_IF_ERROR(qmp.Execute("cont").status());
    result.guest_stopped_seconds = std::chrono::duration<double>(Clock::now() - stopped_at).count();
    stopped_by_us = false;
  } else if (options.then == Then::kLeaveStopped && options.live && result.was_running) {
    HLT_RETURN_IF_ERROR(qmp.Execute("stop").status());
  }
  std::unique_ptr<CheckpointWriter> writer = handler.TakeWriter();
  result.machine_type = state->machine_type;
  result.blocks = state->ram_blocks.size();
  result.data_pages = handler.data_pages();
  result.zero_pages = handler.zero_pages();

  const std::string blob = EncodeSavedVmState(*state);
  result.state_blob_bytes = blob.size();
  HLT_RETURN_IF_ERROR(writer->AddBlob(
      kQemuStateBlobName, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(blob.data()), blob.size())));
  if (options.live && options.live_access_trace && !handler.trace().empty()) {
    HLT_RETURN_IF_ERROR(writer->AddAccessedPages(handler.trace()));
    result.access_trace_pages = handler.trace_pages();
  }
  if (!options.va_walk) {
    result.va.skipped = "off";
  } else if (!guest_info_note.empty()) {
    result.va.skipped = "could not read the guest's memory map or registers: " + guest_info_note;
  } else {
    HLT_RETURN_IF_ERROR(WalkAndHint(handler, cpus, options, *writer, &result.va));
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
