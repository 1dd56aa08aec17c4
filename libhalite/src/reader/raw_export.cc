#include "halite/raw_export.h"

#include <atomic>
#include <deque>
#include <future>

#include "common/worker_pool.h"

namespace halite {

Status ExportRawImage(const CheckpointReader& reader, const std::string& path, const RawExportOptions& options) {
  HLT_ASSIGN_OR_RETURN(auto out, CreateAtomicOutputFile(path, reader.total_pages() * 4096, options.sync));
  const auto& blocks = reader.blocks();
  WorkerPool pool(options.threads);
  // Each task loads one block and writes every page that references it (duplicates included); zero and
  // absent pages stay holes. A bounded window keeps memory at threads x 2 blocks.
  std::deque<std::future<Status>> window;
  Status first;
  uint64_t done = 0;
  auto drain_one = [&] {
    Status s = window.front().get();
    window.pop_front();
    if (!s.ok() && first.ok()) first = s;
    ++done;
    if (options.progress) options.progress(done, blocks.size());
  };
  for (uint32_t b = 0; b < blocks.size() && first.ok(); ++b) {
    if (window.size() >= pool.size() * 2) drain_one();
    window.push_back(pool.Submit([&reader, &out, b]() -> Status {
      std::vector<uint8_t> raw(reader.blocks()[b].raw_length());
      HLT_RETURN_IF_ERROR(reader.ReadBlock(b, raw));
      for (const BlockMember& m : reader.BlockMembers(b)) {
        HLT_RETURN_IF_ERROR(out->WriteAt(uint64_t(m.page) * 4096,
                                         std::span<const uint8_t>(raw.data() + size_t(m.slot) * 4096, 4096)));
      }
      return Status::Ok();
    }));
  }
  while (!window.empty()) drain_one();
  if (!first.ok()) {
    out->Abort();
    return first;
  }
  return out->Commit();
}

}  // namespace halite
