// Checkpoint -> stream (halite/xen/xen_checkpoint.h): the Xen state blob gives the records and the page layout,
// the checkpoint reader gives the pages through a cache of decoded blocks.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "halite/xen/xen_checkpoint.h"

namespace halite::xen {
namespace {

// Serves pages from decoded blocks. The export's page order is known in advance (the layout), so the cache
// evicts the block needed again farthest in the future (Belady's rule, optimal for a known sequence) and drops
// a block at once after its last use. Memory: 8 bytes per data page for the sequence, plus the budget.
class CheckpointPages final : public PageBatchSource {
 public:
  CheckpointPages(const CheckpointReader& reader, const Region& region, uint64_t budget)
      : reader_(reader), region_(region), budget_(std::max<uint64_t>(budget, 1)) {}

  Status Prepare(const XenSaveImage& image) {
    const uint64_t pages = region_.page_count();
    std::vector<uint32_t> last_use(reader_.blocks().size(), kNever);
    block_next_.assign(reader_.blocks().size(), kNever);
    for (size_t b = 0; b < image.pages.batch_count(); ++b) {
      for (const PageRun& run : image.pages.batch(b)) {
        if (run.first_pfn >= pages || run.count > pages - run.first_pfn) {
          return Status::Corrupt(reader_.name() + ": the Xen layout names pfns " + fmt::format("{:#x}", run.first_pfn) + ".." +
                                 fmt::format("{:#x}", run.first_pfn + run.count - 1) + " beyond region \"" + region_.name + "\" (" +
                                 std::to_string(pages) + " pages)");
        }
        if (!PageTypeHasData(static_cast<uint8_t>(run.type))) continue;
        for (uint64_t i = 0; i < run.count; ++i) {
          const uint64_t pfn = run.first_pfn + i;
          PageLocation loc = reader_.Locate(region_.first_page + pfn);
          if (loc.kind == PageKind::kAbsent) {
            return Status::Corrupt(reader_.name() + ": pfn " + fmt::format("{:#x}", pfn) + " carries data in the Xen layout (" +
                                   "PAGE_DATA batch " + std::to_string(b) + ") but is absent from the checkpoint");
          }
          if (sequence_.size() >= kNever) return Status::Unsupported(reader_.name() + ": too many pages to export");
          const uint32_t pos = uint32_t(sequence_.size());
          const uint32_t block = loc.kind == PageKind::kStored ? loc.block : kNever;
          sequence_.push_back(block);
          next_use_.push_back(kNever);
          if (block != kNever) {
            if (last_use[block] == kNever) {
              block_next_[block] = pos;
              ++distinct_;
            } else {
              next_use_[last_use[block]] = pos;
            }
            last_use[block] = pos;
          }
        }
      }
    }
    return Status::Ok();
  }

  Status ReadPages(std::span<const uint64_t> pfns, uint8_t* out) override {
    size_t i = 0;
    while (i < pfns.size()) {
      // A group of pages whose missing blocks fit the budget (at least one block, so the export progresses).
      missing_.clear();
      group_.clear();
      uint64_t missing_bytes = 0;
      size_t j = i;
      for (; j < pfns.size(); ++j) {
        if (pos_ + j - i >= sequence_.size()) return Status::Internal("xen export: more pages than the layout");
        const uint32_t block = sequence_[pos_ + j - i];
        if (block == kNever || group_.count(block)) continue;
        const bool cached = cache_.count(block) != 0;
        const uint64_t add = cached ? 0 : reader_.blocks()[block].raw_length();
        if (!cached && !missing_.empty() && missing_bytes + add > budget_) break;
        group_.insert(block);
        if (!cached) {
          missing_.push_back(block);
          missing_bytes += add;
        }
      }
      HLT_RETURN_IF_ERROR(Load(missing_bytes));
      for (; i < j; ++i) HLT_RETURN_IF_ERROR(Copy(pfns[i], out + i * kPageSize));
    }
    return Status::Ok();
  }

  uint64_t blocks_read() const { return blocks_read_; }
  uint64_t distinct_blocks() const { return distinct_; }

 private:
  static constexpr uint32_t kNever = UINT32_MAX;

  Status Load(uint64_t missing_bytes) {
    if (missing_.empty()) return Status::Ok();
    // Make room: blocks outside this group needed again farthest in the future go first.
    for (auto it = by_next_.rbegin(); it != by_next_.rend() && cached_bytes_ + missing_bytes > budget_;) {
      const uint32_t b = it->second;
      if (group_.count(b)) {
        ++it;
        continue;
      }
      it = std::make_reverse_iterator(by_next_.erase(std::next(it).base()));
      cached_bytes_ -= cache_[b].size();
      cache_.erase(b);
    }
    std::vector<std::span<uint8_t>> outs;
    std::vector<Status> statuses(missing_.size());
    for (uint32_t b : missing_) {
      auto& raw = cache_[b];
      raw.resize(reader_.blocks()[b].raw_length());
      by_next_.emplace(block_next_[b], b);
      cached_bytes_ += raw.size();
      outs.emplace_back(raw);
    }
    blocks_read_ += missing_.size();
    // The reader names the block and what failed; the export stops there.
    return reader_.ReadBlocks(missing_, outs, statuses);
  }

  Status Copy(uint64_t pfn, uint8_t* dst) {
    const uint32_t pos = pos_++;
    PageLocation loc = reader_.Locate(region_.first_page + pfn);
    const uint32_t block = loc.kind == PageKind::kStored ? loc.block : kNever;
    if (block != sequence_[pos]) {
      return Status::Internal("xen export: pfn " + fmt::format("{:#x}", pfn) + " requested out of the layout's order");
    }
    if (loc.kind == PageKind::kAbsent) {
      return Status::Corrupt(reader_.name() + ": pfn " + fmt::format("{:#x}", pfn) + " is absent from the checkpoint");
    }
    if (loc.kind == PageKind::kZero) {
      std::memset(dst, 0, kPageSize);
      return Status::Ok();
    }
    auto it = cache_.find(block);
    if (it == cache_.end()) return Status::Internal("xen export: block " + std::to_string(block) + " not loaded");
    std::memcpy(dst, it->second.data() + uint64_t{loc.slot_in_block} * kPageSize, kPageSize);
    by_next_.erase({block_next_[block], block});
    block_next_[block] = next_use_[pos];
    if (block_next_[block] == kNever) {
      cached_bytes_ -= it->second.size();
      cache_.erase(it);
    } else {
      by_next_.emplace(block_next_[block], block);
    }
    return Status::Ok();
  }

  const CheckpointReader& reader_;
  const Region& region_;
  uint64_t budget_;
  std::vector<uint32_t> sequence_;    // the block of each data page in export order (kNever: a zero page)
  std::vector<uint32_t> next_use_;    // the next position using the same block
  std::vector<uint32_t> block_next_;  // each block's next position
  uint32_t pos_ = 0;
  std::unordered_map<uint32_t, std::vector<uint8_t>> cache_;
  std::set<std::pair<uint32_t, uint32_t>> by_next_;  // cached blocks by next use
  uint64_t cached_bytes_ = 0;
  std::vector<uint32_t> missing_;
  std::unordered_set<uint32_t> group_;
  uint64_t blocks_read_ = 0, distinct_ = 0;
};

class CountingSink final : public SequentialSink {
 public:
  explicit CountingSink(SequentialSink& inner) : inner_(inner) {}
  Status Write(const void* buf, size_t n) override {
    bytes += n;
    return inner_.Write(buf, n);
  }
  Status Flush() override { return inner_.Flush(); }
  uint64_t bytes = 0;

 private:
  SequentialSink& inner_;
};

}  // namespace

Status ExportCheckpointToStream(const CheckpointReader& reader, SequentialSink& out, const ExportOptions& options,
                                ExportStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  const std::string& name = reader.name();
  if (reader.metadata().vmm_kind != VmmKind::kXen) {
    return Status::InvalidArgument(name + ": not a Xen checkpoint (made from " +
                                   VmmKindName(reader.metadata().vmm_kind) + "); use the matching hlt-restore mode");
  }
  auto region_index = reader.FindRegion(kXenRegionName);
  if (!region_index) {
    return Status::Corrupt(name + ": a Xen checkpoint without its region \"" + kXenRegionName + "\"");
  }
  const Region& region = reader.regions()[*region_index];
  if (region.guest_phys_base != 0) {
    return Status::Corrupt(name + ": region \"" + kXenRegionName + "\" starts at guest-physical " +
                           fmt::format("{:#x}", region.guest_phys_base) + " (a Xen physmap starts at 0)");
  }
  auto blob = reader.ReadBlob(kXenStateBlobName);
  if (!blob) {
    if (blob.error().code() == StatusCode::kNotFound) {
      return Status::Corrupt(name + ": a Xen checkpoint without its blob \"" + kXenStateBlobName + "\"");
    }
    return blob.error();
  }
  auto image = DecodeXenState(*blob);
  if (!image) return image.error().WithContext(name + ": blob \"" + kXenStateBlobName + "\"");
  if (options.reorder_like_xen417) OrderLikeXen417(&*image);

  CheckpointPages pages(reader, region, options.cache_bytes);
  HLT_RETURN_IF_ERROR(pages.Prepare(*image));
  CountingSink counting(out);
  Status s = ExportSaveStream(*image, pages, counting);
  if (!s.ok()) {
    // Errors from the image checks carry no name; the sink's and reader's do.
    return s.code() == StatusCode::kInvalidArgument ? Status::Corrupt(name + ": blob \"" + kXenStateBlobName +
                                                                      "\": " + s.message())
                                                    : s;
  }
  if (stats) {
    stats->blocks_read = pages.blocks_read();
    stats->distinct_blocks = pages.distinct_blocks();
    stats->stream_bytes = counting.bytes;
    stats->data_pages = 0;
    for (size_t b = 0; b < image->pages.batch_count(); ++b) {
      for (const PageRun& run : image->pages.batch(b)) {
        if (PageTypeHasData(static_cast<uint8_t>(run.type))) stats->data_pages += run.count;
      }
    }
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return Status::Ok();
}

AppendSinkByteSink::AppendSinkByteSink(std::unique_ptr<AppendSink> sink, size_t buffer_size)
    : sink_(std::move(sink)), buf_(buffer_size) {}

Status AppendSinkByteSink::Write(const void* buf, size_t n) {
  if (n == 0) return Status::Ok();  // empty record bodies come as (nullptr, 0)
  const auto* p = static_cast<const uint8_t*>(buf);
  if (len_ + n > buf_.size()) {
    HLT_RETURN_IF_ERROR(Flush());
    if (n >= buf_.size()) return sink_->Append(std::span<const uint8_t>(p, n));
  }
  std::memcpy(buf_.data() + len_, p, n);
  len_ += n;
  return Status::Ok();
}

Status AppendSinkByteSink::Flush() {
  if (len_ == 0) return Status::Ok();
  Status s = sink_->Append(std::span<const uint8_t>(buf_.data(), len_));
  len_ = 0;
  return s;
}

Status AppendSinkByteSink::Commit() {
  HLT_RETURN_IF_ERROR(Flush());
  return sink_->Commit();
}

}  // namespace halite::xen
