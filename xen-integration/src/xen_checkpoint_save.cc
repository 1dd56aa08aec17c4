// Stream -> checkpoint (halite/xen/xen_checkpoint.h): pages into the writer as they arrive, then the page-table
// hints (read back from the writer), the state blob, Finish.
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

#include "halite/checkpoint_location.h"
#include "halite/page_util.h"
#include "halite/xen/xen_checkpoint.h"
#include "halite/xen/xen_hvm_context.h"

namespace halite::xen {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Gives back the bytes format detection consumed, then the rest of the input.
class PrefixedSource final : public SequentialSource {
 public:
  PrefixedSource(std::vector<uint8_t> prefix, SequentialSource& rest) : prefix_(std::move(prefix)), rest_(rest) {}
  Result<size_t> ReadSome(void* buf, size_t n) override {
    if (pos_ < prefix_.size()) {
      size_t take = std::min(n, prefix_.size() - pos_);
      std::memcpy(buf, prefix_.data() + pos_, take);
      pos_ += take;
      return take;
    }
    return rest_.ReadSome(buf, n);
  }

 private:
  std::vector<uint8_t> prefix_;
  size_t pos_ = 0;
  SequentialSource& rest_;
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

// Gives each batch's pages to the writer as they arrive (the writer's staging is the only copy), growing the
// one region as higher pfns appear, and notes the pages that may be top-level page tables for the walk.
class StagingSink final : public PageBatchSink {
 public:
  StagingSink(const SaveOptions& options, const std::string& path, const XenSaveImage& image)
      : options_(options), path_(path), image_(image), candidates_(options.max_table_candidates) {}

  Status OnPages(const PageBatch& batch) override {
    uint64_t top = 0;
    for (const PageEntry& e : batch.entries) {
      top = std::max(top, e.pfn);
      if (!named_.Insert(e.pfn)) ++named_count_;
    }
    HLT_RETURN_IF_ERROR(CoverPfn(top));
    for (const PageEntry& e : batch.entries) {
      if (e.data) {
        const std::span<const uint8_t, kPageSize> page(e.data, kPageSize);
        HLT_RETURN_IF_ERROR(writer_->PutPage(0, e.pfn, page));
        if (options_.va_walk) candidates_.Observe(PageRef{0, e.pfn}, page);
      } else if (e.type == PageType::kXalloc) {
        HLT_RETURN_IF_ERROR(writer_->PutZeroPages(0, e.pfn, 1));
      } else {  // XTAB, BROKEN: a hole, also when the pfn had data before
        HLT_RETURN_IF_ERROR(writer_->ForgetPages(0, e.pfn, 1));
      }
    }
    return Status::Ok();
  }

  // The writer, created with the first batch (or now, for a stream without pages).
  Result<CheckpointWriter*> Writer() {
    if (!writer_) HLT_RETURN_IF_ERROR(CoverPfn(0));
    return writer_.get();
  }
  std::unique_ptr<CheckpointWriter> TakeWriter() { return std::move(writer_); }
  bool Named(uint64_t pfn) const { return named_.Contains(pfn); }
  uint64_t region_pages() const { return region_pages_; }
  const x86::TopLevelTableCandidates& candidates() const { return candidates_; }

 private:
  // Makes the region reach `pfn`, creating the writer first. The region is pfn 0..highest pfn, so a stream
  // naming a far pfn would cost the writer ~25 bytes per page up to it: refuse that unless the stream has named
  // enough pfns to be that large (Xen sends pfns in ascending order in its first pass, so a real guest never
  // trips this).
  Status CoverPfn(uint64_t pfn) {
    const uint64_t pages = pfn + 1;
    if (writer_ && pages <= region_pages_) return Status::Ok();
    const std::string& name = options_.read.source_name;
    if (pages > (uint64_t{1} << 31)) {
      return Status::Unsupported(name + ": pfn " + fmt::format("{:#x}", pfn) +
                                 " is beyond what a checkpoint region holds (2^31 pages, 8 TiB)");
    }
    if (pages > options_.max_sparse_region_pages && pages / 16 > named_count_) {
      return Status::Unsupported(name + ": the stream names " + std::to_string(named_count_) + " pfns up to " +
                                 fmt::format("{:#x}", pfn) + ": a physmap this sparse would cost the writer ~25 " +
                                 "bytes for each of " + std::to_string(pages) + " pages");
    }
    if (!writer_) {
      WriterOptions wo = options_.writer;
      wo.metadata.vmm_kind = VmmKind::kXen;
      if (wo.metadata.machine_type.empty()) wo.metadata.machine_type = kXenMachineType;
      if (wo.metadata.vm_uuid == Uuid{}) {
        if (auto u = ConfigUuid(image_.config)) wo.metadata.vm_uuid = *u;  // the xl header precedes every page
      }
      HLT_ASSIGN_OR_RETURN(writer_, CheckpointWriter::Create(path_, wo));
      HLT_RETURN_IF_ERROR(writer_->AddRegion(kXenRegionName, 0, pages * kPageSize).status());
    } else {
      HLT_RETURN_IF_ERROR(writer_->ExtendLastRegion(pages * kPageSize));
    }
    region_pages_ = pages;
    return Status::Ok();
  }

  const SaveOptions& options_;
  const std::string& path_;
  const XenSaveImage& image_;
  std::unique_ptr<CheckpointWriter> writer_;
  uint64_t region_pages_ = 0;
  PfnSet named_;
  uint64_t named_count_ = 0;
  x86::TopLevelTableCandidates candidates_;
};

class Saver {
 public:
  Saver(int fd, std::string path, SaveOptions options) : fd_(fd), path_(std::move(path)), opt_(std::move(options)) {}

  Result<SaveResult> Run() {
    // Fail before reading gigabytes when the checkpoint could not be written anyway (an object, s3:// or
    // rados://, has no directory to check: its upload starts with the stream).
    const std::string dir = OutputDir(path_);
    if (!IsObjectStoreUri(path_) && ::access(dir.c_str(), W_OK | X_OK) != 0) {
      return Status::IoError(path_ + ": cannot create files in " + dir, errno);
    }
    HLT_RETURN_IF_ERROR(Import());
    HLT_ASSIGN_OR_RETURN(CheckpointWriter * writer, sink_->Writer());
    CountPages(*writer);
    if (opt_.va_walk) HLT_RETURN_IF_ERROR(Walk(*writer));
    HLT_RETURN_IF_ERROR(Write(sink_->TakeWriter()));
    return std::move(result_);
  }

 private:
  Status Import() {
    const std::string& name = opt_.read.source_name;
    const auto start = Clock::now();
    FdSource fd_source(fd_, FdSourceOptions{name, 256 * 1024});
    ReadOptions read = opt_.read;
    std::vector<uint8_t> head;
    if (opt_.detect_format) {
      head.resize(8);
      size_t got = 0;
      while (got < head.size()) {
        auto r = fd_source.ReadSome(head.data() + got, head.size() - got);
        if (!r) return r.error().WithContext(name);
        if (*r == 0) break;
        got += *r;
      }
      head.resize(got);
      if (auto f = DetectStreamFormat(head)) read.format = *f;  // otherwise the reader explains what is wrong
    }
    PrefixedSource source(std::move(head), fd_source);
    sink_ = std::make_unique<StagingSink>(opt_, path_, image_);
    XenImporter importer(&image_, sink_.get(), read.format);
    HLT_RETURN_IF_ERROR(ReadStream(source, importer, read));
    result_.import = importer.stats();
    result_.format = read.format;
    result_.import_seconds = Since(start);
    return Status::Ok();
  }

  // The final state of the pfns the stream named.
  void CountPages(const CheckpointWriter& writer) {
    result_.region_pages = sink_->region_pages();
    for (uint64_t pfn = 0; pfn < result_.region_pages; ++pfn) {
      switch (writer.ContentOf(0, pfn)) {
        case CheckpointWriter::PageContent::kData:
          ++result_.data_pages;
          break;
        case CheckpointWriter::PageContent::kZero:
          ++result_.zero_pages;
          break;
        case CheckpointWriter::PageContent::kAbsent:
          if (sink_->Named(pfn)) ++result_.hole_pages;
          break;
      }
    }
  }

  Status Walk(CheckpointWriter& writer) {
    const KeptRecord* ctx = nullptr;
    for (const KeptRecord& r : image_.libxc_records) {
      if (r.type == kLibxcHvmContext) ctx = &r;
    }
    if (!ctx) {
      result_.va.skipped = "the stream has no HVM_CONTEXT record";
      return Status::Ok();
    }
    auto summary = ParseHvmContext(ctx->body);
    if (!summary) {
      result_.va.skipped = "HVM context not parsed: " + summary.error().message();
      return Status::Ok();
    }
    std::vector<x86::VcpuControlRegisters> vcpus;
    for (const HvmVcpuRegisters& v : summary->vcpus) vcpus.push_back({v.vcpu, v.cr0, v.cr3, v.cr4, v.efer});
    HLT_ASSIGN_OR_RETURN(result_.va, x86::AddPageTableHints(writer, vcpus, {}, sink_->candidates(), opt_.walk));
    return Status::Ok();
  }

  Status Write(std::unique_ptr<CheckpointWriter> writer) {
    if (opt_.before_finish) HLT_RETURN_IF_ERROR(opt_.before_finish(*writer));
    std::vector<uint8_t> state = EncodeXenState(image_);
    result_.state_blob_bytes = state.size();
    HLT_RETURN_IF_ERROR(writer->AddBlob(kXenStateBlobName, state));
    HLT_ASSIGN_OR_RETURN(result_.summary, writer->Finish());
    return Status::Ok();
  }

  int fd_;
  std::string path_;
  SaveOptions opt_;
  XenSaveImage image_;
  std::unique_ptr<StagingSink> sink_;
  SaveResult result_;
};

}  // namespace

Result<SaveResult> SaveStreamToCheckpoint(int fd, const std::string& path, SaveOptions options) {
  return Saver(fd, path, std::move(options)).Run();
}

}  // namespace halite::xen
