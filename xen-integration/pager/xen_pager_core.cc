#include "xen_pager_core.h"

#include <cinttypes>
#include <cstdio>

#include <fmt/format.h>

#include "halite/xen/xen_checkpoint.h"

namespace halite::xen::pager {
namespace {

// Export never asks the skeleton for data: it has none.
class NoPages final : public PageBatchSource {
 public:
  Status ReadPages(std::span<const uint64_t> pfns, uint8_t*) override {
    return Status::Internal("skeleton export asked for page data (pfn " + fmt::format("{:#x}", pfns.empty() ? 0 : pfns[0]) + ")");
  }
};

}  // namespace

PagerCore::PagerCore(const CheckpointReader& reader, PagingOps& ops, uint32_t region)
    : reader_(reader), ops_(ops), region_(region) {
  const Region& r = reader_.regions()[region_];
  first_page_ = r.first_page;
  pages_ = r.page_count();
  state_.assign(pages_, State::kNone);
}

Result<std::unique_ptr<PagerCore>> PagerCore::Create(const CheckpointReader& reader, PagingOps& ops) {
  if (reader.metadata().vmm_kind != VmmKind::kXen) {
    return Status::InvalidArgument(reader.name() + ": not a Xen checkpoint");
  }
  auto region = reader.FindRegion(kXenRegionName);
  if (!region) return Status::Corrupt(reader.name() + ": a Xen checkpoint without region \"" + kXenRegionName + "\"");
  return std::unique_ptr<PagerCore>(new PagerCore(reader, ops, *region));
}

Status PagerCore::ReadBlock(uint32_t block) {
  block_.resize(reader_.blocks()[block].raw_length());
  return reader_.ReadBlock(block, block_);
}

Status PagerCore::EvictAll() {
  std::vector<uint64_t> busy;
  for (uint64_t gfn = 0; gfn < pages_; ++gfn) {
    if (reader_.Locate(first_page_ + gfn).kind != PageKind::kStored) continue;
    ++stats_.stored_pages;
    HLT_ASSIGN_OR_RETURN(bool evicted, ops_.Evict(gfn));
    if (evicted) {
      state_[gfn] = State::kPagedOut;
      ++paged_out_;
      ++stats_.evicted;
    } else {
      busy.push_back(gfn);
    }
  }
  // Pages the hypervisor keeps resident get their content now, a block at a time.
  uint32_t loaded_block = UINT32_MAX;
  for (uint64_t gfn : busy) {
    PageLocation loc = reader_.Locate(first_page_ + gfn);
    if (loc.block != loaded_block) {
      HLT_RETURN_IF_ERROR(ReadBlock(loc.block));
      loaded_block = loc.block;
    }
    HLT_RETURN_IF_ERROR(ops_.Write(gfn, block_.data() + uint64_t{loc.slot_in_block} * kPageSize));
    state_[gfn] = State::kResident;
    ++stats_.written_unevictable;
  }
  return Status::Ok();
}

Status PagerCore::LoadBlock(uint32_t block, bool fault, uint64_t* loaded) {
  HLT_RETURN_IF_ERROR(ReadBlock(block));
  *loaded = 0;
  for (const BlockMember& m : reader_.BlockMembers(block)) {
    if (m.page < first_page_ || m.page >= first_page_ + pages_) continue;  // another region's page
    const uint64_t gfn = m.page - first_page_;
    if (state_[gfn] != State::kPagedOut) continue;
    HLT_RETURN_IF_ERROR(ops_.Load(gfn, block_.data() + uint64_t{m.slot} * kPageSize));
    state_[gfn] = State::kResident;
    --paged_out_;
    ++*loaded;
  }
  (fault ? stats_.fault_blocks : stats_.background_blocks) += 1;
  (fault ? stats_.fault_pages : stats_.background_pages) += *loaded;
  return Status::Ok();
}

Status PagerCore::OnRequest(const PagingRequest& request) {
  ++stats_.requests;
  const uint64_t gfn = request.gfn;
  if (gfn < pages_ && state_[gfn] == State::kPagedOut) {
    if (request.drop) {
      state_[gfn] = State::kDropped;
      --paged_out_;
      ++stats_.dropped;
    } else {
      uint64_t loaded = 0;
      HLT_RETURN_IF_ERROR(LoadBlock(reader_.Locate(first_page_ + gfn).block, true, &loaded));
    }
  } else {
    // Loaded already (the loader got there first, or an evict-fail notice), or not ours: the vCPU only waits
    // for the answer.
    ++stats_.requests_for_loaded;
  }
  return ops_.Respond(request);
}

Result<bool> PagerCore::LoadNextBlock() {
  const auto& order = reader_.restore_order();
  while (next_in_order_ < order.size() && paged_out_ > 0) {
    const uint32_t block = order[next_in_order_++];
    bool any = false;
    for (const BlockMember& m : reader_.BlockMembers(block)) {
      if (m.page >= first_page_ && m.page < first_page_ + pages_ && state_[m.page - first_page_] == State::kPagedOut) {
        any = true;
        break;
      }
    }
    if (!any) continue;
    uint64_t loaded = 0;
    HLT_RETURN_IF_ERROR(LoadBlock(block, false, &loaded));
    return true;
  }
  return false;
}

XenSaveImage MakeLazySkeleton(const XenSaveImage& image) {
  XenSaveImage out = image;
  PageLayout layout;
  std::vector<PageRun> runs;
  for (size_t b = 0; b < image.pages.batch_count(); ++b) {
    runs.assign(image.pages.batch(b).begin(), image.pages.batch(b).end());
    for (PageRun& r : runs) {
      if (PageTypeHasData(static_cast<uint8_t>(r.type))) r.type = PageType::kXalloc;
    }
    layout.AddBatchRuns(runs);
  }
  out.pages = layout;
  return out;
}

Status ExportSkeleton(const CheckpointReader& reader, SequentialSink& out) {
  if (reader.metadata().vmm_kind != VmmKind::kXen) {
    return Status::InvalidArgument(reader.name() + ": not a Xen checkpoint");
  }
  HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> blob, reader.ReadBlob(kXenStateBlobName));
  auto image = DecodeXenState(blob);
  if (!image) return image.error().WithContext(reader.name() + ": blob \"" + kXenStateBlobName + "\"");
  NoPages none;
  return ExportSaveStream(MakeLazySkeleton(*image), none, out);
}

}  // namespace halite::xen::pager
