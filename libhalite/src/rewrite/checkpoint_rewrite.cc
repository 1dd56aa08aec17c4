// A checkpoint written again from another (halite/checkpoint_rewrite.h).
#include "halite/checkpoint_rewrite.h"

namespace halite {
namespace {

// Every page of the source: stored pages block by block, zero pages as zero, absent pages not at all (they stay
// absent).
Status CopyPages(const CheckpointReader& r, CheckpointWriter& w) {
  std::vector<uint8_t> raw;
  for (uint32_t b = 0; b < r.blocks().size(); ++b) {
    raw.resize(r.blocks()[b].raw_length());
    HLT_RETURN_IF_ERROR(r.ReadBlock(b, raw));
    for (const BlockMember& m : r.BlockMembers(b)) {
      PageRef ref = r.PageOf(m.page);
      HLT_RETURN_IF_ERROR(
          w.PutPage(ref.region, ref.page, std::span<const uint8_t>(raw).subspan(uint64_t(m.slot) * 4096, 4096)));
    }
  }
  for (uint64_t g = 0; g < r.total_pages();) {
    if (r.Locate(g).kind != PageKind::kZero) {
      ++g;
      continue;
    }
    PageRef ref = r.PageOf(g);
    uint64_t end = g + 1;
    uint64_t region_end = r.regions()[ref.region].first_page + r.regions()[ref.region].page_count();
    while (end < region_end && r.Locate(end).kind == PageKind::kZero) ++end;
    HLT_RETURN_IF_ERROR(w.PutZeroPages(ref.region, ref.page, end - g));
    g = end;
  }
  return Status::Ok();
}

}  // namespace

std::vector<PageRun> RestoreOrderRuns(const CheckpointReader& r) {
  std::vector<PageRun> runs;
  for (uint32_t b : r.restore_order()) {
    for (const BlockMember& m : r.BlockMembers(b)) {
      PageRef ref = r.PageOf(m.page);
      if (!runs.empty() && runs.back().first.region == ref.region &&
          runs.back().first.page + runs.back().count == ref.page) {
        ++runs.back().count;
      } else {
        runs.push_back(PageRun{ref, 1, 0});
      }
    }
  }
  return runs;
}

Result<WriteSummary> RewriteCheckpoint(const CheckpointReader& r, const std::string& out, RewriteOptions options) {
  options.writer.metadata = r.metadata();  // kept as it was, creation time included
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointWriter> writer, CheckpointWriter::Create(out, options.writer));
  CheckpointWriter& w = *writer;
  for (const Region& region : r.regions()) {
    HLT_ASSIGN_OR_RETURN(uint32_t index, w.AddRegion(region.name, region.guest_phys_base, region.size,
                                                     region.host_page_size));
    (void)index;
  }
  HLT_RETURN_IF_ERROR(CopyPages(r, w));
  for (uint32_t i = 0; i < r.blobs().size(); ++i) {
    HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> blob, r.ReadBlob(i));
    HLT_RETURN_IF_ERROR(w.AddBlob(r.blobs()[i].name, blob));
  }
  for (const auto& [name, bytes] : options.extra_blobs) HLT_RETURN_IF_ERROR(w.AddBlob(name, bytes));
  if (options.add_hints) HLT_RETURN_IF_ERROR(options.add_hints(w));
  HLT_RETURN_IF_ERROR(w.AddVaRuns(RestoreOrderRuns(r)));
  return w.Finish();
}

}  // namespace halite
