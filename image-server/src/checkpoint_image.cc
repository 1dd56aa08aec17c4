// A checkpoint region as a flat image (checkpoint_image.h).
#include "halite/image_server/checkpoint_image.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>

namespace halite::image_server {
namespace {

constexpr uint64_t kPage = 4096;
// Decoded blocks kept in memory: enough for the reads in flight and the page-cache stores queued behind them;
// the page cache, not this, is what keeps a block for the clones.
constexpr size_t kKeptBlocks = 16;

}  // namespace

uint64_t DecodedBlock::pages() const {
  uint64_t n = 0;
  for (const auto& r : runs) n += r.slots.size();
  return n;
}

class CheckpointImage::Impl {
 public:
  Impl(std::shared_ptr<const CheckpointReader> reader, uint32_t region)
      : reader_(std::move(reader)), region_(reader_->regions()[region]) {}

  uint64_t size() const { return region_.size; }
  const std::string& name() const { return region_.name; }
  const CheckpointReader& reader() const { return *reader_; }

  Result<size_t> Read(uint64_t offset, std::span<uint8_t> out, std::vector<DecodedBlock>* decoded) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.reads;
    }
    if (offset >= region_.size) return size_t{0};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(out.size(), region_.size - offset));
    size_t done = 0;
    uint64_t zero_pages = 0;
    while (done < n) {
      const uint64_t at = offset + done;
      const uint64_t page = at / kPage, in_page = at % kPage;
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(kPage - in_page, n - done));
      const PageLocation loc = reader_->Locate(region_.first_page + page);
      if (loc.kind != PageKind::kStored) {
        std::memset(out.data() + done, 0, chunk);
        ++zero_pages;
      } else {
        Result<std::shared_ptr<const std::vector<uint8_t>>> data = Block(loc.block, decoded);
        if (!data) {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.read_errors;
          return data.error();
        }
        std::memcpy(out.data() + done, (*data)->data() + uint64_t{loc.slot_in_block} * kPage + in_page, chunk);
      }
      done += chunk;
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_read += n;
    stats_.zero_pages_read += zero_pages;
    return n;
  }

  Result<DecodedBlock> Decode(uint32_t block) {
    if (block >= reader_->blocks().size()) return Status::InvalidArgument("no block " + std::to_string(block));
    std::vector<DecodedBlock> decoded;
    HLT_ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<uint8_t>> data, Block(block, &decoded));
    if (!decoded.empty()) return std::move(decoded.front());
    return Describe(block, std::move(data));
  }

  std::vector<uint32_t> RestoreOrder() const {
    std::vector<uint32_t> out;
    for (uint32_t b : reader_->restore_order()) {
      for (const BlockMember& m : reader_->BlockMembers(b)) {
        if (Ours(m.page)) {
          out.push_back(b);
          break;
        }
      }
    }
    return out;
  }

  bool WasDecoded(uint32_t block) const {
    std::lock_guard<std::mutex> lock(mu_);
    return ever_decoded_.count(block) > 0;
  }

  CheckpointImageStats Stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    CheckpointImageStats s = stats_;
    s.distinct_blocks = ever_decoded_.size();
    return s;
  }

 private:
  // One block being decoded or recently decoded.
  struct Entry {
    bool done = false;
    Status status;
    std::shared_ptr<const std::vector<uint8_t>> data;
  };

  bool Ours(uint64_t global_page) const {
    return global_page >= region_.first_page && global_page < region_.first_page + region_.page_count();
  }

  // The block's pages of this image in runs of consecutive offsets.
  DecodedBlock Describe(uint32_t block, std::shared_ptr<const std::vector<uint8_t>> data) const {
    DecodedBlock d;
    d.block = block;
    d.data = std::move(data);
    std::vector<BlockMember> members;
    for (const BlockMember& m : reader_->BlockMembers(block)) {
      if (Ours(m.page)) members.push_back(m);
    }
    std::sort(members.begin(), members.end(), [](const BlockMember& a, const BlockMember& b) { return a.page < b.page; });
    for (const BlockMember& m : members) {
      const uint64_t offset = (m.page - region_.first_page) * kPage;
      if (d.runs.empty() || d.runs.back().image_offset + d.runs.back().slots.size() * kPage != offset) {
        d.runs.push_back({offset, {}});
      }
      d.runs.back().slots.push_back(m.slot);
    }
    return d;
  }

  // The decoded block: from memory, from a decode in flight (waited for), or decoded now (and then described in
  // `decoded`).
  Result<std::shared_ptr<const std::vector<uint8_t>>> Block(uint32_t block, std::vector<DecodedBlock>* decoded) {
    std::shared_ptr<Entry> entry;
    bool mine = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto it = entries_.find(block);
      if (it != entries_.end()) {
        entry = it->second;
        cv_.wait(lock, [&] { return entry->done; });
        if (entry->status.ok()) {
          Touch(block);
          return entry->data;
        }
        // A failed decode is not kept: try again (the error may have been transient).
        if (entries_.count(block) && entries_[block] == entry) entries_.erase(block);
      }
      entry = std::make_shared<Entry>();
      entries_[block] = entry;
      mine = true;
    }
    (void)mine;
    auto data = std::make_shared<std::vector<uint8_t>>(reader_->blocks()[block].raw_length());
    Status s = reader_->ReadBlock(block, *data);
    {
      std::lock_guard<std::mutex> lock(mu_);
      entry->done = true;
      entry->status = s;
      if (s.ok()) {
        entry->data = data;
        ++stats_.blocks_decoded;
        stats_.checkpoint_bytes += reader_->blocks()[block].stored_length;
        ever_decoded_.insert({block, true});
        Touch(block);
        Evict();
      } else {
        entries_.erase(block);
      }
    }
    cv_.notify_all();
    if (!s.ok()) return s;
    if (decoded != nullptr) decoded->push_back(Describe(block, data));
    return std::shared_ptr<const std::vector<uint8_t>>(data);
  }

  // Most recently used last. Called with mu_ held.
  void Touch(uint32_t block) {
    auto it = lru_pos_.find(block);
    if (it != lru_pos_.end()) lru_.erase(it->second);
    lru_.push_back(block);
    lru_pos_[block] = std::prev(lru_.end());
  }

  void Evict() {
    while (lru_.size() > kKeptBlocks) {
      const uint32_t old = lru_.front();
      lru_.pop_front();
      lru_pos_.erase(old);
      auto it = entries_.find(old);
      if (it != entries_.end() && it->second->done) entries_.erase(it);
    }
  }

  std::shared_ptr<const CheckpointReader> reader_;
  const Region region_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint32_t, std::shared_ptr<Entry>> entries_;
  std::list<uint32_t> lru_;
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> lru_pos_;
  std::unordered_map<uint32_t, bool> ever_decoded_;
  CheckpointImageStats stats_;
};

Result<std::unique_ptr<CheckpointImage>> CheckpointImage::Open(std::shared_ptr<const CheckpointReader> reader,
                                                               const std::string& region) {
  HLT_ASSIGN_OR_RETURN(uint32_t index, reader->FindRegion(region));
  return std::unique_ptr<CheckpointImage>(new CheckpointImage(std::make_unique<Impl>(std::move(reader), index)));
}

CheckpointImage::CheckpointImage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointImage::~CheckpointImage() = default;
uint64_t CheckpointImage::size() const { return impl_->size(); }
const std::string& CheckpointImage::region_name() const { return impl_->name(); }
const CheckpointReader& CheckpointImage::reader() const { return impl_->reader(); }
Result<size_t> CheckpointImage::Read(uint64_t offset, std::span<uint8_t> out, std::vector<DecodedBlock>* decoded) {
  return impl_->Read(offset, out, decoded);
}
Result<DecodedBlock> CheckpointImage::Decode(uint32_t block) { return impl_->Decode(block); }
bool CheckpointImage::WasDecoded(uint32_t block) const { return impl_->WasDecoded(block); }
std::vector<uint32_t> CheckpointImage::RestoreOrder() const { return impl_->RestoreOrder(); }
CheckpointImageStats CheckpointImage::Stats() const { return impl_->Stats(); }

}  // namespace halite::image_server
