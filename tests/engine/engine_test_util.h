// Helpers for the restore engine tests: checkpoints built in memory, a sink that records what it is given and
// catches double installs, and a file that injects faults.
#ifndef HALITE_TESTS_ENGINE_TEST_UTIL_H_
#define HALITE_TESTS_ENGINE_TEST_UTIL_H_

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/page_sink.h"
#include "halite/storage.h"
#include "support/wait_for.h"  // WaitFor

namespace halite::testing {

// A checkpoint held in memory, with the content it was made from.
struct MemCheckpoint {
  std::vector<uint8_t> bytes;                 // the file
  std::vector<std::vector<uint8_t>> content;  // per region: what each page should read as after a restore
  std::vector<Region> regions;
};

struct RegionSpec {
  std::string name;
  uint64_t pages;
  uint32_t host_page_size = 4096;
};

// Builds a checkpoint from `content` (one byte vector per region, pages * 4096 each). Pages listed in `absent`
// (global numbers) are never given to the writer, so they are absent; their content is zero.
inline MemCheckpoint BuildCheckpoint(const std::vector<RegionSpec>& specs, std::vector<std::vector<uint8_t>> content,
                                     WriterOptions options, const std::vector<PageRun>& access = {},
                                     const std::set<uint64_t>& absent = {}) {
  MemCheckpoint m;
  options.sink.sync = false;
  options.deterministic = true;
  if (options.threads == 0) options.threads = 2;
  auto w = CheckpointWriter::Create(NewMemorySink("mem.hlt", &m.bytes), options);
  REQUIRE(w.has_value());
  uint64_t g = 0;
  for (size_t r = 0; r < specs.size(); ++r) {
    auto idx = (*w)->AddRegion(specs[r].name, r << 32, specs[r].pages * 4096, specs[r].host_page_size);
    REQUIRE(idx.has_value());
    for (uint64_t p = 0; p < specs[r].pages; ++p, ++g) {
      std::span<uint8_t> page(content[r].data() + p * 4096, 4096);
      if (absent.count(g)) {
        std::memset(page.data(), 0, 4096);
        continue;
      }
      Status s = (*w)->PutPage(uint32_t(r), p, page);
      REQUIRE(s.ok());
    }
  }
  if (!access.empty()) {
    Status s = (*w)->AddAccessedPages(access);
    REQUIRE(s.ok());
  }
  auto sum = (*w)->Finish();
  INFO((sum ? std::string() : sum.error().ToString()));
  REQUIRE(sum.has_value());
  m.content = std::move(content);
  m.regions = (*w)->regions();
  return m;
}

// A RandomAccessFile over another that counts reads and can fail or slow them.
class FaultyFile : public RandomAccessFile {
 public:
  explicit FaultyFile(std::unique_ptr<RandomAccessFile> base) : base_(std::move(base)) {}
  const std::string& name() const override { return base_->name(); }
  uint64_t size() const override { return base_->size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override {
    reads_.fetch_add(1);
    if (delay_us_.load()) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_.load()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fail_offset_ == offset && fail_left_ > 0) {
        --fail_left_;
        return Status::IoError(name() + ": injected EIO at offset " + std::to_string(offset), 5).set_retryable(true);
      }
    }
    return base_->ReadAt(offset, buffer);
  }
  // The next `times` reads at `offset` fail with a retryable EIO.
  void FailAt(uint64_t offset, int times) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_offset_ = offset;
    fail_left_ = times;
  }
  void set_delay_us(uint64_t us) { delay_us_ = us; }
  uint64_t reads() const { return reads_.load(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> delay_us_{0};
  std::mutex mu_;
  uint64_t fail_offset_ = UINT64_MAX;
  int fail_left_ = 0;
};

// Opens `m` through a FaultyFile; *file (optional) receives the injector, owned by the reader.
inline std::unique_ptr<CheckpointReader> OpenMem(const MemCheckpoint& m, FaultyFile** file = nullptr) {
  auto f = std::make_unique<FaultyFile>(NewMemoryFile("mem.hlt", m.bytes));
  if (file) *file = f.get();
  auto r = CheckpointReader::Open(std::move(f));
  INFO((r ? std::string() : r.error().ToString()));
  REQUIRE(r.has_value());
  return std::move(*r);
}

// A sink writing into per-region buffers, recording every page installed and any page installed twice.
class RecordingSink : public PageSink {
 public:
  explicit RecordingSink(const std::vector<Region>& regions) : regions_(regions) {
    for (const auto& r : regions) {
      memory_.emplace_back(r.size, 0xEE);  // not zero: a page never installed is visibly wrong
      flags_.emplace_back(r.page_count());
    }
  }
  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override {
    (priority == InstallPriority::kUrgent ? urgent_batches_ : background_batches_).fetch_add(1);
    *runs_installed = 0;
    for (const PageInstall& run : batch) {
      HLT_RETURN_IF_ERROR(run.zero() ? InstallZeroRun(run) : InstallDataRun(run));
      ++*runs_installed;
    }
    batches_.fetch_add(1);
    return Status::Ok();
  }
  bool IsPresent(PageRef page) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return present_.count({page.region, page.page}) > 0;
  }

  void SetPresent(PageRef page) {
    std::lock_guard<std::mutex> lock(mu_);
    present_.insert({page.region, page.page});
  }
  bool Installed(PageRef p) const { return flags_[p.region][p.page].load() > 0; }
  const uint8_t* Page(PageRef p) const { return memory_[p.region].data() + p.page * 4096; }
  uint64_t double_installs() const { return doubles_.load(); }
  uint64_t calls() const { return calls_.load(); }  // runs with data
  uint64_t batches() const { return batches_.load(); }
  uint64_t urgent_batches() const { return urgent_batches_.load(); }
  uint64_t background_batches() const { return background_batches_.load(); }
  void FailNextInstalls(int n) { fail_installs_ = n; }
  void set_install_delay_us(uint64_t us) { install_delay_us_ = us; }

 private:
  Status InstallDataRun(const PageInstall& run) {
    if (run.data.size() != run.count * 4096) return Status::Internal("data size mismatch");
    if (fail_installs_.load() > 0) {
      fail_installs_.fetch_sub(1);
      return Status::IoError("injected sink failure");
    }
    if (install_delay_us_.load()) std::this_thread::sleep_for(std::chrono::microseconds(install_delay_us_.load()));
    for (uint64_t i = 0; i < run.count; ++i) Mark(PageRef{run.first.region, run.first.page + i});
    std::memcpy(memory_[run.first.region].data() + run.first.page * 4096, run.data.data(), run.data.size());
    calls_.fetch_add(1);
    return Status::Ok();
  }
  Status InstallZeroRun(const PageInstall& run) {
    for (uint64_t i = 0; i < run.count; ++i) Mark(PageRef{run.first.region, run.first.page + i});
    std::memset(memory_[run.first.region].data() + run.first.page * 4096, 0, run.count * 4096);
    zero_calls_.fetch_add(1);
    return Status::Ok();
  }
  void Mark(PageRef p) {
    if (flags_[p.region][p.page].fetch_add(1) > 0) doubles_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    if (present_.count({p.region, p.page})) doubles_.fetch_add(1);  // installed over a present page
  }
  std::vector<Region> regions_;
  std::vector<std::vector<uint8_t>> memory_;
  std::vector<std::vector<std::atomic<uint32_t>>> flags_;
  mutable std::mutex mu_;
  std::set<std::pair<uint32_t, uint64_t>> present_;
  std::atomic<uint64_t> doubles_{0}, calls_{0}, zero_calls_{0}, batches_{0};
  std::atomic<uint64_t> urgent_batches_{0}, background_batches_{0};
  std::atomic<int> fail_installs_{0};
  std::atomic<uint64_t> install_delay_us_{0};
};

// Every stored page of `m` was installed in `sink` with the saved bytes, and no page went in twice.
inline void CheckEveryStoredPage(const RecordingSink& sink, const MemCheckpoint& m, const CheckpointReader& r) {
  uint64_t wrong = 0, missing = 0;
  for (uint64_t g = 0; g < r.total_pages(); ++g) {
    if (r.Locate(g).kind != PageKind::kStored) continue;
    PageRef p = r.PageOf(g);
    if (!sink.Installed(p)) {
      ++missing;
    } else if (std::memcmp(sink.Page(p), m.content[p.region].data() + p.page * 4096, 4096) != 0) {
      ++wrong;
    }
  }
  CHECK(missing == 0);
  CHECK(wrong == 0);
  CHECK(sink.double_installs() == 0);
}

}  // namespace halite::testing

#endif  // HALITE_TESTS_ENGINE_TEST_UTIL_H_
