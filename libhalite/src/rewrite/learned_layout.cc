// Learned layouts of golden checkpoints (halite/learned_layout.h).
#include "halite/learned_layout.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <unordered_set>

#include <fmt/format.h>

#include "halite/checkpoint_location.h"
#include "halite/checkpoint_rewrite.h"

namespace halite {
namespace {

std::string Hex(std::span<const uint8_t> bytes) {
  std::string s;
  for (uint8_t b : bytes) s += fmt::format("{:02x}", b);
  return s;
}

// One restorer at a time writes a learned layout: an flock on CKPT.learned.lock (released if it dies). Object
// stores have no such lock; two learners there both write a valid file, the last one stays.
class LearnLock {
 public:
  // False when another process holds it.
  static Result<bool> Take(const std::string& learned, LearnLock* lock) {
    if (IsObjectStoreUri(learned)) return true;
    lock->path_ = learned + ".lock";
    lock->fd_ = ::open(lock->path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock->fd_ < 0) return Status::IoError(lock->path_ + ": cannot create the learning lock", errno);
    if (::flock(lock->fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) return false;
      return Status::IoError(lock->path_ + ": flock", errno);
    }
    return true;
  }
  ~LearnLock() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());
    ::close(fd_);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

void AddBlockPages(const CheckpointReader& r, uint32_t block, std::vector<PageRun>* trace, uint64_t* pages) {
  for (const BlockMember& m : r.BlockMembers(block)) {
    const PageRef ref = r.PageOf(m.page);
    if (!trace->empty() && trace->back().first.region == ref.region &&
        trace->back().first.page + trace->back().count == ref.page) {
      ++trace->back().count;
    } else {
      trace->push_back(PageRun{ref, 1, 0});
    }
    ++*pages;
  }
}

}  // namespace

std::string LearnedLayoutPath(const std::string& checkpoint) { return checkpoint + ".learned"; }

std::unique_ptr<CheckpointReader> OpenLearnedLayout(const std::string& checkpoint, const CheckpointReader& source,
                                                    const ReaderOptions& options, std::string* why_not) {
  const std::string path = LearnedLayoutPath(checkpoint);
  if (!IsObjectStoreUri(path) && ::access(path.c_str(), F_OK) != 0) {
    *why_not = "no learned layout yet (" + path + ")";
    return nullptr;
  }
  auto learned = CheckpointReader::Open(path, options);
  if (!learned) {
    *why_not = learned.error().code() == StatusCode::kNotFound ? "no learned layout yet (" + path + ")"
                                                                : learned.error().ToString();
    return nullptr;
  }
  auto from = (*learned)->ReadBlob(kLearnedFromBlobName);
  if (!from) {
    *why_not = path + " does not say which checkpoint it was learned from";
    return nullptr;
  }
  const FileId& id = source.file_id();
  if (from->size() != id.size() || !std::equal(id.begin(), id.end(), from->begin())) {
    *why_not = fmt::format("{} was learned from another checkpoint (file_id {}), not {} (file_id {})", path,
                           Hex(*from), checkpoint, Hex(id));
    return nullptr;
  }
  if ((*learned)->regions() != source.regions() || (*learned)->total_pages() != source.total_pages()) {
    *why_not = path + " does not have the regions of " + checkpoint;
    return nullptr;
  }
  return std::move(*learned);
}

Result<LearnReport> LearnLayout(const std::string& checkpoint, const CheckpointReader& source,
                                std::span<const PageRef> demanded, WriterOptions writer) {
  LearnReport report;
  const std::vector<uint32_t>& order = source.restore_order();
  report.hot_blocks_before = std::min<uint32_t>(source.working_set_blocks(), uint32_t(order.size()));
  std::unordered_set<uint32_t> hot(order.begin(), order.begin() + report.hot_blocks_before);
  std::vector<uint32_t> demanded_blocks;
  std::unordered_set<uint32_t> seen;
  for (const PageRef& ref : demanded) {
    if (ref.region >= source.regions().size() || ref.page >= source.regions()[ref.region].page_count()) continue;
    const PageLocation loc = source.Locate(source.GlobalPage(ref));
    if (loc.kind != PageKind::kStored || !seen.insert(loc.block).second) continue;
    ++report.demanded_blocks;
    if (!hot.count(loc.block)) demanded_blocks.push_back(loc.block);
  }
  report.new_blocks = uint32_t(demanded_blocks.size());
  if (demanded_blocks.empty()) {
    report.skipped = report.demanded_blocks ? "every block the restore waited for was in the working set already"
                                            : "the restore waited for no block";
    return report;
  }
  const std::string path = LearnedLayoutPath(checkpoint);
  LearnLock lock;
  HLT_ASSIGN_OR_RETURN(bool locked, LearnLock::Take(path, &lock));
  if (!locked) {
    report.skipped = "another restore is writing " + path;
    return report;
  }
  std::string why_not;
  if (OpenLearnedLayout(checkpoint, source, ReaderOptions{}, &why_not) != nullptr) {
    report.skipped = path + " was written meanwhile by another restore";
    return report;
  }

  // The new working set: the old one, then what the restore had to wait for, in the order it waited.
  std::vector<PageRun> trace;
  for (uint32_t i = 0; i < report.hot_blocks_before; ++i) AddBlockPages(source, order[i], &trace, &report.trace_pages);
  for (uint32_t b : demanded_blocks) AddBlockPages(source, b, &trace, &report.trace_pages);
  RewriteOptions options;
  options.writer = std::move(writer);
  options.add_hints = [&trace](CheckpointWriter& w) { return w.AddAccessedPages(trace); };
  const FileId& id = source.file_id();
  options.extra_blobs.emplace_back(kLearnedFromBlobName, std::vector<uint8_t>(id.begin(), id.end()));
  HLT_ASSIGN_OR_RETURN(report.summary, RewriteCheckpoint(source, path, std::move(options)));
  report.path = path;
  return report;
}

}  // namespace halite
