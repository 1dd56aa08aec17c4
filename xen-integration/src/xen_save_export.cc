// Export: XenSaveImage + PageBatchSource -> stream; and the canonical Xen 4.17 record order.
#include <algorithm>
#include <string>

#include "halite/xen/xen_save_image.h"
#include "halite/xen/xen_stream_writer.h"

namespace halite::xen {
namespace {

Status CheckImage(const XenSaveImage& image) {
  const auto& xc = image.libxc_records;
  if (xc.empty() || xc.back().type != kLibxcEnd) return Status::InvalidArgument("libxc records must end with END");
  uint32_t prev = 0;
  for (size_t i = 0; i < xc.size(); ++i) {
    if (xc[i].type == kLibxcPageData) return Status::InvalidArgument("libxc records hold a PAGE_DATA record");
    if (xc[i].type == kLibxcEnd && i + 1 != xc.size()) return Status::InvalidArgument("libxc END before the last");
    if (xc[i].page_batches_before < prev || xc[i].page_batches_before > image.pages.batch_count()) {
      return Status::InvalidArgument("libxc record " + std::to_string(i) + " placed after batch " +
                                     std::to_string(xc[i].page_batches_before) + " (out of order or beyond the " +
                                     std::to_string(image.pages.batch_count()) + " batches)");
    }
    prev = xc[i].page_batches_before;
  }
  if (xc.back().page_batches_before != image.pages.batch_count()) {
    return Status::InvalidArgument("libxc END must follow all page batches");
  }
  if (image.format == StreamFormat::kLibxc) return Status::Ok();
  const auto& xl = image.libxl_records;
  if (xl.empty() || xl.back().type != kLibxlEnd) return Status::InvalidArgument("libxl records must end with END");
  auto contexts = std::count_if(xl.begin(), xl.end(), [](const KeptRecord& r) { return r.type == kLibxlLibxcContext; });
  if (contexts != 1) return Status::InvalidArgument("libxl records need exactly one LIBXC_CONTEXT");
  return Status::Ok();
}

class Exporter {
 public:
  Exporter(const XenSaveImage& image, PageBatchSource& pages, SequentialSink& out)
      : image_(image), pages_(pages), writer_(out) {}

  Status Run() {
    if (image_.format == StreamFormat::kXl) {
      XlHeader h;
      h.mandatory_flags = image_.xl_mandatory_flags;
      h.optional_flags = image_.xl_optional_flags;
      h.has_config = image_.xl_has_config;
      h.config = image_.config;
      h.optional_tail = image_.xl_optional_tail;
      HLT_RETURN_IF_ERROR(writer_.WriteXlHeader(h));
    }
    if (image_.format == StreamFormat::kLibxc) return WriteLibxc();
    HLT_RETURN_IF_ERROR(writer_.WriteLibxlHeader(LibxlHeader{image_.libxl_options}));
    for (const KeptRecord& r : image_.libxl_records) {
      HLT_RETURN_IF_ERROR(writer_.WriteLibxlRecord(r.type, r.body));
      if (r.type == kLibxlLibxcContext) HLT_RETURN_IF_ERROR(WriteLibxc());
    }
    return Status::Ok();
  }

 private:
  Status WriteLibxc() {
    HLT_RETURN_IF_ERROR(writer_.WriteLibxcHeaders(image_.libxc));
    const auto& records = image_.libxc_records;
    size_t next = 0;
    for (size_t b = 0; b < image_.pages.batch_count(); ++b) {
      for (; next < records.size() && records[next].page_batches_before <= b; ++next) {
        HLT_RETURN_IF_ERROR(writer_.WriteLibxcRecord(records[next].type, records[next].body));
      }
      HLT_RETURN_IF_ERROR(WriteBatch(image_.pages.batch(b)));
    }
    for (; next < records.size(); ++next) {
      HLT_RETURN_IF_ERROR(writer_.WriteLibxcRecord(records[next].type, records[next].body));
    }
    return Status::Ok();
  }

  // Writes one stored batch; an empty one (all pages superseded) is skipped, a larger-than-1024 one (read with a
  // raised limit) is split, because Xen's restorer and savers stay within 1024.
  Status WriteBatch(std::span<const PageRun> runs) {
    entries_.clear();
    for (const PageRun& run : runs) {
      for (uint64_t i = 0; i < run.count; ++i) {
        entries_.push_back(PageEntry{run.first_pfn + i, run.type, nullptr});
        if (entries_.size() == kSaverBatchPfnsMax) HLT_RETURN_IF_ERROR(FlushEntries());
      }
    }
    return entries_.empty() ? Status::Ok() : FlushEntries();
  }

  Status FlushEntries() {
    data_pfns_.clear();
    for (const PageEntry& e : entries_) {
      if (PageTypeHasData(static_cast<uint8_t>(e.type))) data_pfns_.push_back(e.pfn);
    }
    if (!data_pfns_.empty()) {
      data_.resize(data_pfns_.size() * kPageSize);
      HLT_RETURN_IF_ERROR(pages_.ReadPages(data_pfns_, data_.data()));
      const uint8_t* p = data_.data();
      for (PageEntry& e : entries_) {
        if (PageTypeHasData(static_cast<uint8_t>(e.type))) {
          e.data = p;
          p += kPageSize;
        }
      }
    }
    Status s = writer_.WritePageBatch(entries_);
    entries_.clear();
    return s;
  }

  const XenSaveImage& image_;
  PageBatchSource& pages_;
  StreamWriter writer_;
  std::vector<PageEntry> entries_;
  std::vector<uint64_t> data_pfns_;
  std::vector<uint8_t> data_;
};

// Rank of a libxc record in Xen 4.17's HVM save order (xg_sr_save.c save(), xg_sr_save_x86_hvm.c).
int LibxcRank(uint32_t type) {
  switch (type) {
    case kLibxcX86CpuidPolicy: return 0;
    case kLibxcX86MsrPolicy: return 1;
    case kLibxcStaticDataEnd: return 2;
    case kLibxcX86TscInfo: return 4;
    case kLibxcHvmContext: return 5;
    case kLibxcHvmParams: return 6;
    case kLibxcEnd: return 8;
    default: return 7;  // optional records, which Xen never writes: after the known ones
  }
}

int LibxlRank(uint32_t type) {
  switch (type) {
    case kLibxlLibxcContext: return 0;
    case kLibxlEmulatorXenstoreData: return 1;
    case kLibxlEmulatorContext: return 2;
    case kLibxlEnd: return 4;
    default: return 3;
  }
}

}  // namespace

Status ExportSaveStream(const XenSaveImage& image, PageBatchSource& pages, SequentialSink& out) {
  HLT_RETURN_IF_ERROR(CheckImage(image));
  HLT_RETURN_IF_ERROR(Exporter(image, pages, out).Run());
  return out.Flush();
}

void OrderLikeXen417(XenSaveImage* image) {
  auto& xc = image->libxc_records;
  std::erase_if(xc, [](const KeptRecord& r) { return r.type == kLibxcVerify; });
  auto has = [](const std::vector<KeptRecord>& v, uint32_t type) {
    return std::any_of(v.begin(), v.end(), [type](const KeptRecord& r) { return r.type == type; });
  };
  if (!has(xc, kLibxcStaticDataEnd)) xc.push_back(KeptRecord{kLibxcStaticDataEnd, {}, 0});
  if (!has(xc, kLibxcEnd)) xc.push_back(KeptRecord{kLibxcEnd, {}, 0});
  std::stable_sort(xc.begin(), xc.end(),
                   [](const KeptRecord& a, const KeptRecord& b) { return LibxcRank(a.type) < LibxcRank(b.type); });
  const auto batches = static_cast<uint32_t>(image->pages.batch_count());
  for (KeptRecord& r : xc) r.page_batches_before = LibxcRank(r.type) <= 2 ? 0 : batches;
  image->libxc.version = kLibxcVersion;

  if (image->format == StreamFormat::kLibxc) return;
  auto& xl = image->libxl_records;
  if (!has(xl, kLibxlLibxcContext)) xl.push_back(KeptRecord{kLibxlLibxcContext, {}, 0});
  if (!has(xl, kLibxlEnd)) xl.push_back(KeptRecord{kLibxlEnd, {}, 0});
  std::stable_sort(xl.begin(), xl.end(),
                   [](const KeptRecord& a, const KeptRecord& b) { return LibxlRank(a.type) < LibxlRank(b.type); });
}

}  // namespace halite::xen
