// Stream -> checkpoint (halite/xen/xen_checkpoint.h): import with a page index, walk the guest's page tables,
// then give the pages to the writer in pfn order.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "halite/page_util.h"
#include "halite/xen/xen_checkpoint.h"
#include "halite/xen/xen_hvm_context.h"

namespace halite::xen {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Gives back the bytes format detection consumed, then the rest of the input.
class PrefixedSource final : public ByteSource {
 public:
  PrefixedSource(std::vector<uint8_t> prefix, ByteSource& rest) : prefix_(std::move(prefix)), rest_(rest) {}
  Result<size_t> Read(void* buf, size_t n) override {
    if (pos_ < prefix_.size()) {
      size_t take = std::min(n, prefix_.size() - pos_);
      std::memcpy(buf, prefix_.data() + pos_, take);
      pos_ += take;
      return take;
    }
    return rest_.Read(buf, n);
  }

 private:
  std::vector<uint8_t> prefix_;
  size_t pos_ = 0;
  ByteSource& rest_;
};

// The final state of every pfn the stream names: a sparse table of 512-pfn chunks, 8 bytes a pfn.
// Value 0: never named; kHole: XTAB/BROKEN; kZero: XALLOC or all-zero data; >= kData: data at byte offset
// (value - kData) of the backing file.
constexpr uint64_t kUnseen = 0, kHole = 1, kZero = 2, kData = 16;

class PfnIndex {
 public:
  uint64_t& At(uint64_t pfn) {
    const uint64_t c = pfn >> 9;
    if (c != last_chunk_ || !last_) {
      auto& slot = chunks_[c];
      if (!slot) slot = std::make_unique<Chunk>();
      last_ = slot.get();
      last_chunk_ = c;
    }
    return (*last_)[pfn & 511];
  }
  uint64_t Get(uint64_t pfn) const {
    auto it = chunks_.find(pfn >> 9);
    return it == chunks_.end() ? kUnseen : (*it->second)[pfn & 511];
  }
  // Calls f(pfn, value) for every named pfn in ascending order.
  template <typename F>
  Status ForEach(F&& f) const {
    std::vector<uint64_t> keys;
    keys.reserve(chunks_.size());
    for (auto& [k, v] : chunks_) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (uint64_t k : keys) {
      const Chunk& c = *chunks_.at(k);
      for (uint64_t i = 0; i < 512; ++i) {
        if (c[i] != kUnseen) HLT_RETURN_IF_ERROR(f((k << 9) | i, c[i]));
      }
    }
    return Status::Ok();
  }

 private:
  using Chunk = std::array<uint64_t, 512>;
  std::unordered_map<uint64_t, std::unique_ptr<Chunk>> chunks_;
  Chunk* last_ = nullptr;
  uint64_t last_chunk_ = 0;
};

Status PreadAll(int fd, uint8_t* p, size_t n, uint64_t offset, const std::string& name) {
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::IoError(name + ": read at offset " + fmt::format("{:#x}", offset) + " failed", errno);
    if (got == 0) return Status::IoError(name + ": unexpected end of file at offset " + fmt::format("{:#x}", offset));
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
  return Status::Ok();
}

Status PwriteAll(int fd, const uint8_t* p, size_t n, uint64_t offset, const std::string& name) {
  while (n > 0) {
    ssize_t put = ::pwrite(fd, p, n, off_t(offset));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return Status::IoError(name + ": write at offset " + fmt::format("{:#x}", offset) + " failed", errno);
    p += put;
    n -= size_t(put);
    offset += uint64_t(put);
  }
  return Status::Ok();
}

// Where page data is read back from: the input file itself, or an unlinked spool file.
class Backing {
 public:
  ~Backing() {
    if (spool_fd_ >= 0) ::close(spool_fd_);
  }
  void UseInput(int fd, uint64_t base, std::string name) {
    fd_ = fd;
    base_ = base;
    name_ = std::move(name);
  }
  Status OpenSpool(const std::string& dir) {
    spool_fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (spool_fd_ < 0) {
      std::string tmpl = dir + "/.hlt-xen-spool.XXXXXX";
      spool_fd_ = ::mkstemp(tmpl.data());
      if (spool_fd_ < 0) return Status::IoError(dir + ": cannot create the page spool file", errno);
      ::unlink(tmpl.c_str());
    }
    fd_ = spool_fd_;
    name_ = dir + "/(page spool)";
    buffer_.resize(kBufferPages * kPageSize);
    return Status::Ok();
  }
  bool spooling() const { return spool_fd_ >= 0; }
  uint64_t spool_bytes() const { return spool_end_; }
  const std::string& name() const { return name_; }

  // Spool mode: stores a page; `*where` is its offset, kept when the pfn already had one (a resent page).
  Status Store(const uint8_t* page, uint64_t* where, bool has_slot) {
    if (!has_slot) {
      *where = spool_end_;
      spool_end_ += kPageSize;
    }
    if (*where >= buffer_first_) {
      const uint64_t at = *where - buffer_first_;
      std::memcpy(buffer_.data() + at, page, kPageSize);
      buffer_len_ = std::max<uint64_t>(buffer_len_, at + kPageSize);
      if (buffer_len_ == buffer_.size()) return Flush();
      return Status::Ok();
    }
    return PwriteAll(spool_fd_, page, kPageSize, *where, name_);
  }
  Status Flush() {
    if (!spooling() || buffer_len_ == 0) return Status::Ok();
    HLT_RETURN_IF_ERROR(PwriteAll(spool_fd_, buffer_.data(), buffer_len_, buffer_first_, name_));
    buffer_first_ += buffer_len_;
    buffer_len_ = 0;
    return Status::Ok();
  }
  // Reads n bytes at backing offset `where` (after Flush()).
  Status Read(uint64_t where, uint8_t* out, size_t n) const { return PreadAll(fd_, out, n, base_ + where, name_); }

 private:
  static constexpr size_t kBufferPages = 256;
  int fd_ = -1;
  int spool_fd_ = -1;
  uint64_t base_ = 0;
  std::string name_;
  uint64_t spool_end_ = 0;
  std::vector<uint8_t> buffer_;
  uint64_t buffer_first_ = 0;  // spool offset of buffer_[0]
  uint64_t buffer_len_ = 0;
};

// Records each pfn's final state as batches stream by; spools data when the input cannot be read again.
class IndexingSink final : public PageBatchSink {
 public:
  IndexingSink(PfnIndex* index, Backing* backing, uint64_t max_candidates)
      : index_(index), backing_(backing), max_candidates_(max_candidates) {}

  Status OnPages(const PageBatch& batch) override {
    // Where this record's page data starts in the input: header, count + reserved, the pfn table.
    const uint64_t data_start = batch.offset + kRecordHeaderSize + kPageDataHeaderSize + 8 * batch.entries.size();
    uint64_t k = 0;
    bool checked = false;
    for (const PageEntry& e : batch.entries) {
      max_pfn_ = std::max(max_pfn_, e.pfn);
      uint64_t& state = index_->At(e.pfn);
      if (state == kUnseen) ++named_;
      if (!e.data) {
        state = e.type == PageType::kXalloc ? kZero : kHole;
        continue;
      }
      const uint64_t in_input = data_start + kPageSize * k++;
      if (IsAllZero(std::span<const uint8_t>(e.data, kPageSize))) {
        state = kZero;
        continue;
      }
      if (backing_->spooling()) {
        uint64_t where = state >= kData ? state - kData : 0;
        HLT_RETURN_IF_ERROR(backing_->Store(e.data, &where, state >= kData));
        state = kData + where;
      } else {
        state = kData + in_input;
        if (!checked) {  // the offset arithmetic must hold: compare one page a batch with the file
          checked = true;
          std::array<uint8_t, kPageSize> again;
          HLT_RETURN_IF_ERROR(backing_->Read(in_input, again.data(), kPageSize));
          if (std::memcmp(again.data(), e.data, kPageSize) != 0) {
            return Status::IoError(backing_->name() + ": page data of pfn " + fmt::format("{:#x}", e.pfn) + " at offset " +
                                   fmt::format("{:#x}", in_input) + " reads back differently (input modified while read?)");
          }
        }
      }
      std::span<const uint8_t, kPageSize> page(e.data, kPageSize);
      if (candidates_.size() < max_candidates_ && x86::LooksLikeTopLevelTable(page, kX86MaxPfn)) {
        candidates_.emplace_back(e.pfn, x86::KernelHalfFingerprint(page));
      } else if (candidates_.size() >= max_candidates_) {
        candidates_truncated_ = true;
      }
    }
    return Status::Ok();
  }

  uint64_t max_pfn() const { return max_pfn_; }
  uint64_t named() const { return named_; }
  const std::vector<std::pair<uint64_t, uint64_t>>& candidates() const { return candidates_; }
  bool candidates_truncated() const { return candidates_truncated_; }

 private:
  PfnIndex* index_;
  Backing* backing_;
  uint64_t max_candidates_;
  uint64_t max_pfn_ = 0;
  uint64_t named_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> candidates_;  // (pfn, kernel-half fingerprint)
  bool candidates_truncated_ = false;
};

std::string OutputDir(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// The VM's UUID from the libxl JSON config ({"c_info": {"uuid": "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"}}), when the
// config parses as JSON and the UUID is well formed; otherwise none (the checkpoint then records no UUID).
std::optional<Uuid> ConfigUuid(const std::vector<uint8_t>& config) {
  // libxl stores the config NUL-terminated. No exceptions: a config that does not parse is a "discarded" value.
  auto end = config.end();
  while (end != config.begin() && end[-1] == 0) --end;
  const auto json = nlohmann::json::parse(config.begin(), end, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  auto c_info = json.find("c_info");
  if (c_info == json.end() || !c_info->is_object()) return std::nullopt;
  auto uuid = c_info->find("uuid");
  if (uuid == c_info->end() || !uuid->is_string()) return std::nullopt;
  const std::string& text = uuid->get_ref<const std::string&>();
  // 8-4-4-4-12 hexadecimal digits.
  if (text.size() != 36) return std::nullopt;
  Uuid u{};
  size_t n = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool dash_position = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_position) {
      if (c != '-') return std::nullopt;
      continue;
    }
    int v = -1;
    if (c >= '0' && c <= '9') v = c - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    if (v < 0) return std::nullopt;
    u[n / 2] = uint8_t(u[n / 2] << 4 | v);
    ++n;
  }
  return u;
}

class Saver {
 public:
  Saver(int fd, std::string path, SaveOptions options) : fd_(fd), path_(std::move(path)), opt_(std::move(options)) {}

  Result<SaveResult> Run() {
    // Fail before reading gigabytes when the checkpoint could not be written anyway.
    const std::string dir = OutputDir(path_);
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      return Status::IoError(path_ + ": cannot create files in " + dir, errno);
    }
    HLT_RETURN_IF_ERROR(Import());
    HLT_RETURN_IF_ERROR(backing_.Flush());
    HLT_RETURN_IF_ERROR(CheckInputUnchanged());
    HLT_RETURN_IF_ERROR(CheckRegionSize());
    if (opt_.va_walk) HLT_RETURN_IF_ERROR(Walk());
    HLT_RETURN_IF_ERROR(Write());
    return std::move(result_);
  }

 private:
  Status Import() {
    const std::string& name = opt_.read.source_name;
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::IoError(name + ": cannot stat", errno);
    off_t base = S_ISREG(st.st_mode) ? ::lseek(fd_, 0, SEEK_CUR) : off_t(-1);
    if (base >= 0) {
      backing_.UseInput(fd_, uint64_t(base), name);
      input_stat_ = st;
      result_.reread_input = true;
    } else {
      HLT_RETURN_IF_ERROR(backing_.OpenSpool(opt_.spool_dir.empty() ? OutputDir(path_) : opt_.spool_dir));
    }
    const auto start = Clock::now();
    FdByteSource fd_source(fd_);
    ReadOptions read = opt_.read;
    std::vector<uint8_t> head;
    if (opt_.detect_format) {
      head.resize(8);
      size_t got = 0;
      while (got < head.size()) {
        auto r = fd_source.Read(head.data() + got, head.size() - got);
        if (!r) return r.error().WithContext(name);
        if (*r == 0) break;
        got += *r;
      }
      head.resize(got);
      if (auto f = DetectStreamFormat(head)) read.format = *f;  // otherwise the reader explains what is wrong
    }
    PrefixedSource source(std::move(head), fd_source);
    sink_ = std::make_unique<IndexingSink>(&index_, &backing_, opt_.max_table_candidates);
    HLT_ASSIGN_OR_RETURN(image_, ImportSaveStream(source, *sink_, read, &result_.import));
    result_.format = read.format;
    result_.import_seconds = Since(start);
    result_.spool_bytes = backing_.spool_bytes();
    return Status::Ok();
  }

  Status CheckInputUnchanged() {
    if (!result_.reread_input) return Status::Ok();
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::IoError(opt_.read.source_name + ": cannot stat", errno);
    if (st.st_size != input_stat_.st_size || st.st_mtim.tv_sec != input_stat_.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != input_stat_.st_mtim.tv_nsec) {
      return Status::IoError(opt_.read.source_name + ": the file changed while it was read");
    }
    return Status::Ok();
  }

  Status CheckRegionSize() {
    region_pages_ = sink_->named() ? sink_->max_pfn() + 1 : 1;
    if (region_pages_ > (uint64_t{1} << 31)) {
      return Status::Unsupported(opt_.read.source_name + ": pfn " + fmt::format("{:#x}", sink_->max_pfn()) +
                                 " is beyond what a checkpoint region holds (2^31 pages, 8 TiB)");
    }
    if (region_pages_ > opt_.max_sparse_region_pages && region_pages_ / 16 > sink_->named()) {
      return Status::Unsupported(opt_.read.source_name + ": the stream names " + std::to_string(sink_->named()) +
                                 " pfns up to " + fmt::format("{:#x}", sink_->max_pfn()) +
                                 ": a physmap this sparse would cost the writer ~25 bytes for each of " +
                                 std::to_string(region_pages_) + " pages");
    }
    result_.region_pages = region_pages_;
    return Status::Ok();
  }

  Result<bool> ReadGuestPage(uint64_t pfn, std::span<uint8_t, kPageSize> out) {
    if (pfn >= region_pages_) return false;
    uint64_t state = index_.Get(pfn);
    if (state == kUnseen || state == kHole) return false;
    if (state == kZero) {
      std::memset(out.data(), 0, kPageSize);
      return true;
    }
    HLT_RETURN_IF_ERROR(backing_.Read(state - kData, out.data(), kPageSize));
    return true;
  }

  Status Walk() {
    VaReport& va = result_.va;
    const auto start = Clock::now();
    const KeptRecord* ctx = nullptr;
    for (const KeptRecord& r : image_.libxc_records) {
      if (r.type == kLibxcHvmContext) ctx = &r;
    }
    if (!ctx) {
      va.skipped = "the stream has no HVM_CONTEXT record";
      return Status::Ok();
    }
    auto summary = ParseHvmContext(ctx->body);
    if (!summary) {
      va.skipped = "HVM context not parsed: " + summary.error().message();
      return Status::Ok();
    }
    va.vcpus = uint32_t(summary->vcpus.size());
    std::vector<x86::PagingRoot> roots;
    for (const HvmVcpuRegisters& v : summary->vcpus) {
      auto root = x86::PagingRootFromRegisters(v.cr0, v.cr3, v.cr4, v.efer);
      if (root) {
        roots.push_back(*root);
      } else {
        va.notes += (va.notes.empty() ? "" : "; ") + std::string("vCPU ") + std::to_string(v.vcpu) + ": " +
                    root.error().message();
      }
    }
    if (roots.empty()) {
      va.skipped = summary->vcpus.empty() ? "the HVM context has no vCPU" : "no vCPU in long mode (" + va.notes + ")";
      return Status::Ok();
    }
    x86::GuestPageReader read = [this](uint64_t pfn, std::span<uint8_t, kPageSize> out) {
      return ReadGuestPage(pfn, out);
    };
    // Only pages whose kernel half matches a vCPU root's (or its PTI kernel copy's) are worth reading again.
    std::unordered_set<uint64_t> fingerprints;
    std::array<uint8_t, kPageSize> page;
    for (const auto& r : roots) {
      for (uint64_t pfn : {r.table_pfn, r.table_pfn & ~uint64_t{1}}) {
        HLT_ASSIGN_OR_RETURN(bool present, ReadGuestPage(pfn, page));
        if (present) fingerprints.insert(x86::KernelHalfFingerprint(page));
      }
    }
    std::vector<uint64_t> candidates;
    for (const auto& [pfn, fp] : sink_->candidates()) {
      if (fingerprints.count(fp)) candidates.push_back(pfn);
    }
    va.candidates = sink_->candidates().size();
    x86::GuestWalkOptions walk = opt_.walk;
    walk.limits.max_pfn = region_pages_ - 1;
    // Runs cost ~60 bytes each by the time the writer has them; real guests need about one per page mapped,
    // shared pages (libraries) once per process. Keep hostile tables from costing more than that.
    walk.max_total_runs = std::min(walk.max_total_runs, std::max<uint64_t>(uint64_t{1} << 16, 2 * region_pages_));
    auto gw = x86::WalkGuestAddressSpaces(read, roots, candidates, walk);
    if (!gw) {
      if (gw.error().code() != StatusCode::kNotFound) return gw.error();
      va.skipped = gw.error().message();
      return Status::Ok();
    }
    va.cpu_roots = gw->cpu_roots;
    va.pti_kernel_copies = gw->pti_kernel_copies;
    va.scan_roots = uint32_t(gw->scan.roots.size());
    va.truncated = gw->truncated || gw->scan.truncated || sink_->candidates_truncated();
    for (const auto& s : gw->spaces) {
      va.table_pages += s.stats.tables;
      va.runs += s.runs.size();
      va.truncated |= s.stats.truncated;
    }
    Region region{kXenRegionName, 0, region_pages_ * kPageSize, 4096, 0};
    hints_ = x86::ToPageRuns(gw->spaces, std::span<const Region>(&region, 1));
    va.hint_runs = hints_.size();
    va.mapped_pages = x86::CountMappedPages(gw->spaces, [this](uint64_t pfn) { return index_.Get(pfn) >= kZero; });
    va.mapped_nonzero_pages =
        x86::CountMappedPages(gw->spaces, [this](uint64_t pfn) { return index_.Get(pfn) >= kData; });
    va.mapped_nonzero_small_pages =
        x86::CountMappedPages(gw->spaces, [this](uint64_t pfn) { return index_.Get(pfn) >= kData; }, false);
    va.seconds = Since(start);
    return Status::Ok();
  }

  Status Write() {
    WriterOptions wo = opt_.writer;
    wo.metadata.vmm_kind = VmmKind::kXen;
    if (wo.metadata.machine_type.empty()) wo.metadata.machine_type = kXenMachineType;
    if (wo.metadata.vm_uuid == Uuid{}) {
      if (auto u = ConfigUuid(image_.config)) wo.metadata.vm_uuid = *u;
    }
    HLT_ASSIGN_OR_RETURN(auto writer, CheckpointWriter::Create(path_, wo));
    HLT_ASSIGN_OR_RETURN(uint32_t region, writer->AddRegion(kXenRegionName, 0, region_pages_ * kPageSize));
    const auto start = Clock::now();
    // Pages in pfn order; data read back in runs that are contiguous in the backing file.
    constexpr size_t kRunPages = 256;
    std::vector<uint8_t> buf(kRunPages * kPageSize);
    uint64_t run_pfn = 0, run_where = 0, run_len = 0;
    auto flush = [&]() -> Status {
      if (run_len == 0) return Status::Ok();
      HLT_RETURN_IF_ERROR(backing_.Read(run_where, buf.data(), run_len * kPageSize));
      for (uint64_t i = 0; i < run_len; ++i) {
        HLT_RETURN_IF_ERROR(writer->PutPage(region, run_pfn + i, std::span(buf.data() + i * kPageSize, kPageSize)));
      }
      run_len = 0;
      return Status::Ok();
    };
    uint64_t zero_first = 0, zero_len = 0;
    auto flush_zero = [&]() -> Status {
      if (zero_len) HLT_RETURN_IF_ERROR(writer->PutZeroPages(region, zero_first, zero_len));
      zero_len = 0;
      return Status::Ok();
    };
    HLT_RETURN_IF_ERROR(index_.ForEach([&](uint64_t pfn, uint64_t state) -> Status {
      if (state == kZero) {
        ++result_.zero_pages;
        if (zero_len && zero_first + zero_len == pfn) {
          ++zero_len;
        } else {
          HLT_RETURN_IF_ERROR(flush_zero());
          zero_first = pfn;
          zero_len = 1;
        }
        return Status::Ok();
      }
      if (state == kHole) {
        ++result_.hole_pages;
        return Status::Ok();
      }
      ++result_.data_pages;
      const uint64_t where = state - kData;
      if (run_len && run_len < kRunPages && run_pfn + run_len == pfn && run_where + run_len * kPageSize == where) {
        ++run_len;
        return Status::Ok();
      }
      HLT_RETURN_IF_ERROR(flush());
      run_pfn = pfn;
      run_where = where;
      run_len = 1;
      return Status::Ok();
    }));
    HLT_RETURN_IF_ERROR(flush());
    HLT_RETURN_IF_ERROR(flush_zero());
    result_.pages_seconds = Since(start);
    if (!hints_.empty()) HLT_RETURN_IF_ERROR(writer->AddVaRuns(hints_));
    if (opt_.before_finish) HLT_RETURN_IF_ERROR(opt_.before_finish(*writer));
    std::vector<uint8_t> state = EncodeXenState(image_);
    result_.state_blob_bytes = state.size();
    HLT_RETURN_IF_ERROR(writer->AddBlob(kXenStateBlobName, state));
    HLT_ASSIGN_OR_RETURN(result_.summary, writer->Finish());
    // Coverage's denominator: the pages stored with content (the writer's view, after zero detection).
    result_.va.nonzero_pages = result_.data_pages;
    return Status::Ok();
  }

  int fd_;
  std::string path_;
  SaveOptions opt_;
  struct stat input_stat_ {};
  Backing backing_;
  PfnIndex index_;
  std::unique_ptr<IndexingSink> sink_;
  XenSaveImage image_;
  uint64_t region_pages_ = 0;
  std::vector<halite::PageRun> hints_;
  SaveResult result_;
};

}  // namespace

Result<SaveResult> SaveStreamToCheckpoint(int fd, const std::string& path, SaveOptions options) {
  return Saver(fd, path, std::move(options)).Run();
}

}  // namespace halite::xen
