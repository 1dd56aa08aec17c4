// Fault injection: the reader and the writer over storage that fails the way real storage does.
//
// Reader: an injected I/O error is kIoError (retryable exactly when transient), never kCorrupt and never wrong
// bytes; a flipped bit is kCorrupt, never data. Writer: any failed append, short write or failed sync makes
// Finish fail and leaves nothing committed, over a memory sink and over the real atomic file sink (whose
// directory must then be empty, or hold the previous file unchanged); a torn write gives a file readers reject.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/fault_injection.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"

using namespace halite;

namespace {

using halite::testing::ListDirectory;
using halite::testing::ReadWholeFile;

constexpr uint64_t kPages = 96;
constexpr size_t kPage = 4096;

void Spit(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

const std::vector<uint8_t>& Memory() {
  static const std::vector<uint8_t> m = testing::SyntheticBytes(kPages * kPage, 42);
  return m;
}
const std::vector<uint8_t>& BlobBytes() {
  static const std::vector<uint8_t> b = testing::SyntheticBytes(3 * kPage, 7);
  return b;
}

WriterOptions Options(const std::string& staging) {
  WriterOptions o;
  o.block_pages = 4;
  o.threads = 2;
  o.dictionary = DictionaryMode::kOff;
  o.deterministic = true;
  o.file_id = FileId{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  o.staging_dir = staging;
  return o;
}

// Writes the test checkpoint through `sink`. Returns Finish's status.
Status WriteTo(std::unique_ptr<AppendSink> sink, const std::string& staging) {
  auto w = CheckpointWriter::Create(std::move(sink), Options(staging));
  if (!w) return w.error();
  auto r = (*w)->AddRegion("ram", 0, kPages * kPage);
  if (!r) return r.error();
  for (uint64_t p = 0; p < kPages; ++p) {
    if (p % 17 == 16) continue;  // some absent pages
    HLT_RETURN_IF_ERROR((*w)->PutPage(*r, p, std::span(Memory()).subspan(p * kPage, kPage)));
  }
  PageRun hot{PageRef{0, 10}, 6, 0};
  HLT_RETURN_IF_ERROR((*w)->AddAccessedPages(std::span(&hot, 1)));
  HLT_RETURN_IF_ERROR((*w)->AddBlob("device", BlobBytes()));
  HLT_RETURN_IF_ERROR((*w)->AddBlob("tiny", std::vector<uint8_t>{1, 2, 3}));
  return (*w)->Finish().status();
}

const std::vector<uint8_t>& Checkpoint() {
  static const std::vector<uint8_t> file = [] {
    std::vector<uint8_t> out;
    Status s = WriteTo(NewMemorySink("ckpt.hlt", &out), "/tmp");
    REQUIRE(s.ok());
    return out;
  }();
  return file;
}

std::span<const uint8_t> Expected(uint64_t g) {
  static const std::vector<uint8_t> zero(kPage, 0);
  if (g % 17 == 16) return zero;
  return std::span(Memory()).subspan(g * kPage, kPage);
}

std::shared_ptr<FaultInjector> Injector(FaultPlan plan) { return std::make_shared<FaultInjector>(plan); }

Result<std::unique_ptr<CheckpointReader>> OpenFaulty(std::shared_ptr<FaultInjector> injector) {
  return CheckpointReader::Open(NewFaultInjectingFile(NewMemoryFile("ckpt.hlt", Checkpoint()), std::move(injector)));
}

// Opens with faults disabled, then enables them for what follows.
std::unique_ptr<CheckpointReader> OpenThenArm(const std::shared_ptr<FaultInjector>& injector) {
  injector->set_enabled(false);
  auto r = OpenFaulty(injector);
  REQUIRE(r.has_value());
  injector->set_enabled(true);
  return std::move(*r);
}

void RequireInjectedIoError(const Status& s, bool transient) {
  INFO(s.ToString());
  REQUIRE(s.code() == StatusCode::kIoError);
  CHECK(s.retryable() == transient);
  CHECK(s.message().find("ckpt.hlt") != std::string::npos);
  CHECK(s.message().find("offset 0x") != std::string::npos);
}

}  // namespace

TEST_CASE("fault injector: schedules fire as planned", "[fault]") {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i);
  std::vector<uint8_t> buf(100);

  SECTION("on the Kth call, once") {
    FaultPlan plan;
    plan.on_call = 3;
    auto inj = Injector(plan);
    auto f = NewFaultInjectingFile(NewMemoryFile("f", bytes), inj);
    for (int i = 1; i <= 6; ++i) CHECK(f->ReadAt(0, buf).ok() == (i != 3));
    CHECK(inj->faults_injected() == 1);
    CHECK(inj->operations() == 6);
  }
  SECTION("after N bytes, with a short read ending exactly there") {
    FaultPlan plan;
    plan.fault = Fault::kShortTransfer;
    plan.after_bytes = 250;
    auto inj = Injector(plan);
    auto f = NewFaultInjectingFile(NewMemoryFile("f", bytes), inj);
    CHECK(f->ReadAt(0, buf).ok());
    CHECK(f->ReadAt(100, buf).ok());
    std::fill(buf.begin(), buf.end(), 0xEE);
    Status s = f->ReadAt(200, buf);
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.retryable());
    CHECK(s.message().find("50 of 100 bytes") != std::string::npos);
    CHECK(buf[49] == uint8_t(249));  // the prefix arrived
    CHECK(buf[50] == 0xEE);          // the rest did not
    CHECK(f->ReadAt(200, buf).ok());  // transient: the retry succeeds
  }
  SECTION("permanent: the device stays dead") {
    FaultPlan plan;
    plan.on_call = 2;
    plan.permanent = true;
    auto inj = Injector(plan);
    auto f = NewFaultInjectingFile(NewMemoryFile("f", bytes), inj);
    CHECK(f->ReadAt(0, buf).ok());
    for (int i = 0; i < 3; ++i) {
      Status s = f->ReadAt(0, buf);
      CHECK(s.code() == StatusCode::kIoError);
      CHECK_FALSE(s.retryable());
    }
    CHECK(inj->failed_permanently());
    CHECK(inj->faults_injected() == 1);
  }
  SECTION("probability: seeded and repeatable, bounded by max_faults") {
    auto pattern = [&](uint64_t seed, uint64_t max_faults) {
      FaultPlan plan;
      plan.probability = 0.3;
      plan.seed = seed;
      plan.max_faults = max_faults;
      auto f = NewFaultInjectingFile(NewMemoryFile("f", bytes), Injector(plan));
      std::string p;
      for (int i = 0; i < 200; ++i) p += f->ReadAt(0, buf).ok() ? '.' : 'X';
      return p;
    };
    std::string a = pattern(5, kNoTrigger);
    CHECK(a == pattern(5, kNoTrigger));
    CHECK(a != pattern(6, kNoTrigger));
    auto faults = std::count(a.begin(), a.end(), 'X');
    CHECK(faults > 30);
    CHECK(faults < 100);
    std::string limited = pattern(5, 4);
    CHECK(std::count(limited.begin(), limited.end(), 'X') == 4);
  }
  SECTION("offset range and bit flips") {
    FaultPlan plan;
    plan.fault = Fault::kBitFlip;
    plan.offset_begin = 530;
    plan.offset_end = 531;
    auto f = NewFaultInjectingFile(NewMemoryFile("f", bytes), Injector(plan));
    REQUIRE(f->ReadAt(500, buf).ok());
    int diffs = 0;
    for (size_t i = 0; i < buf.size(); ++i) diffs += buf[i] != uint8_t(500 + i);
    CHECK(diffs == 1);
    CHECK(buf[30] != uint8_t(530));
    REQUIRE(f->ReadAt(0, buf).ok());  // does not overlap: untouched
    for (size_t i = 0; i < buf.size(); ++i) CHECK(buf[i] == uint8_t(i));
  }
  SECTION("disabled injectors pass everything") {
    FaultPlan plan;
    plan.probability = 1;
    auto inj = Injector(plan);
    inj->set_enabled(false);
    auto f = NewFaultInjectingFile(NewMemoryFile("f", bytes), inj);
    CHECK(f->ReadAt(0, buf).ok());
    CHECK(inj->operations() == 0);
  }
  SECTION("sinks: short write, torn write, failed sync") {
    std::vector<uint8_t> out;
    std::vector<uint8_t> chunk(100, 0x5A);
    {
      FaultPlan plan;
      plan.fault = Fault::kShortTransfer;
      plan.after_bytes = 130;
      auto s = NewFaultInjectingSink(NewMemorySink("s", &out), Injector(plan));
      CHECK(s->Append(chunk).ok());
      Status e = s->Append(chunk);
      CHECK(e.code() == StatusCode::kIoError);
      CHECK(e.message().find("30 of 100 bytes") != std::string::npos);
      CHECK(s->position() == 130);
    }
    CHECK(out.empty());  // destroyed without commit
    {
      FaultPlan plan;
      plan.fault = Fault::kTornWrite;
      plan.after_bytes = 130;
      auto s = NewFaultInjectingSink(NewMemorySink("s", &out), Injector(plan));
      for (int i = 0; i < 3; ++i) CHECK(s->Append(chunk).ok());
      CHECK(s->position() == 300);  // what the writer believes
      CHECK(s->Commit().ok());
      CHECK(out.size() == 130);     // what reached the device
    }
    {
      out.clear();
      FaultPlan plan;
      plan.fault = Fault::kFailedSync;
      auto s = NewFaultInjectingSink(NewMemorySink("s", &out), Injector(plan));
      CHECK(s->Append(chunk).ok());
      Status e = s->Commit();
      CHECK(e.code() == StatusCode::kIoError);
      CHECK(e.sys_errno() == EIO);
      CHECK(out.empty());
    }
  }
}

TEST_CASE("reader: an I/O error while opening is kIoError, retryable when transient", "[fault][reader]") {
  // Count the reads Open makes.
  auto counter = Injector(FaultPlan{});
  REQUIRE(OpenFaulty(counter).has_value());
  const uint64_t open_reads = counter->operations();
  REQUIRE(open_reads >= 3);  // footer, header, index
  for (bool permanent : {false, true}) {
    for (Fault fault : {Fault::kEio, Fault::kShortTransfer}) {
      for (uint64_t k = 1; k <= open_reads; ++k) {
        FaultPlan plan;
        plan.fault = fault;
        plan.on_call = k;
        plan.permanent = permanent;
        auto r = OpenFaulty(Injector(plan));
        INFO(FaultName(fault) << " on read " << k << (permanent ? " (permanent)" : ""));
        REQUIRE_FALSE(r.has_value());
        RequireInjectedIoError(r.error(), !permanent);
      }
    }
  }
  // Short reads at every point of the bytes Open reads.
  const uint64_t bytes_read = Checkpoint().size();  // an upper bound of what Open reads
  for (uint64_t n = 0; n < 200; ++n) {
    FaultPlan plan;
    plan.fault = Fault::kShortTransfer;
    plan.after_bytes = n * 37 % bytes_read;
    auto r = OpenFaulty(Injector(plan));
    if (r.has_value()) continue;  // the threshold lay beyond what Open read
    RequireInjectedIoError(r.error(), true);
  }
}

TEST_CASE("reader: faults during page reads give kIoError or the right bytes, never corruption", "[fault][reader]") {
  for (Fault fault : {Fault::kEio, Fault::kShortTransfer}) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      FaultPlan plan;
      plan.fault = fault;
      plan.probability = 0.25;
      plan.seed = seed;
      auto inj = Injector(plan);
      auto reader = OpenThenArm(inj);
      std::vector<uint8_t> page(kPage);
      uint64_t failures = 0;
      for (uint64_t g = 0; g < kPages; ++g) {
        // Transient errors are retried a bounded number of times, as a restorer does.
        Status s;
        for (int attempt = 0; attempt < 20; ++attempt) {
          std::fill(page.begin(), page.end(), 0xCC);
          s = reader->ReadPage(g, page);
          if (s.ok()) break;
          ++failures;
          RequireInjectedIoError(s, true);
          CHECK(s.message().find("block ") != std::string::npos);
        }
        REQUIRE(s.ok());
        REQUIRE(std::equal(page.begin(), page.end(), Expected(g).begin()));
      }
      CHECK(failures > 0);
      CHECK(inj->faults_injected() == failures);
    }
  }
}

TEST_CASE("reader: a permanent failure makes every later read kIoError, not retryable", "[fault][reader]") {
  FaultPlan plan;
  plan.on_call = 5;
  plan.permanent = true;
  auto inj = Injector(plan);
  auto reader = OpenThenArm(inj);
  std::vector<uint8_t> page(kPage);
  int ok = 0;
  for (uint64_t g = 0; g < kPages; ++g) {
    if (reader->Locate(g).kind != PageKind::kStored) continue;
    Status s = reader->ReadPage(g, page);
    if (s.ok()) {
      ++ok;
      CHECK(std::equal(page.begin(), page.end(), Expected(g).begin()));
      continue;
    }
    RequireInjectedIoError(s, false);
  }
  CHECK(ok == 4);
  Status v = reader->VerifyAll();
  RequireInjectedIoError(v, false);
  auto blob = reader->ReadBlob("device");
  REQUIRE_FALSE(blob.has_value());
  RequireInjectedIoError(blob.error(), false);
}

TEST_CASE("reader: a fault inside one block or blob is reported for it, as an I/O error", "[fault][reader]") {
  auto plain = CheckpointReader::Open(NewMemoryFile("ckpt.hlt", Checkpoint()));
  REQUIRE(plain.has_value());
  const auto blocks = (*plain)->blocks();
  const auto blobs = (*plain)->blobs();
  REQUIRE(blocks.size() >= 4);
  for (uint32_t target : {uint32_t(0), uint32_t(3), uint32_t(blocks.size() - 1)}) {
    FaultPlan plan;
    plan.offset_begin = blocks[target].offset + blocks[target].stored_length / 2;
    plan.offset_end = plan.offset_begin + 1;
    auto inj = Injector(plan);
    auto reader = OpenThenArm(inj);
    Status v = reader->VerifyAll();
    INFO(v.ToString());
    RequireInjectedIoError(v, true);
    CHECK(v.message().find("block " + std::to_string(target) + ":") != std::string::npos);

    // A batch: only the faulty block fails; the others arrive intact.
    std::vector<uint32_t> ids;
    std::vector<std::vector<uint8_t>> outs;
    std::vector<std::span<uint8_t>> spans;
    for (uint32_t b = 0; b < blocks.size(); ++b) {
      ids.push_back(b);
      outs.emplace_back(blocks[b].raw_length());
    }
    for (auto& o : outs) spans.push_back(o);
    std::vector<Status> statuses(ids.size());
    Status first = reader->ReadBlocks(ids, spans, statuses);
    RequireInjectedIoError(first, true);
    for (uint32_t b = 0; b < blocks.size(); ++b) {
      INFO("block " << b);
      if (b == target) {
        RequireInjectedIoError(statuses[b], true);
        continue;
      }
      REQUIRE(statuses[b].ok());
      std::vector<uint8_t> want(blocks[b].raw_length());
      REQUIRE((*plain)->ReadBlock(b, want).ok());
      CHECK(outs[b] == want);
    }
  }
  for (uint32_t i = 0; i < blobs.size(); ++i) {
    FaultPlan plan;
    plan.fault = Fault::kShortTransfer;
    plan.offset_begin = blobs[i].offset;
    plan.offset_end = blobs[i].offset + blobs[i].stored_length;
    auto reader = OpenThenArm(Injector(plan));
    auto b = reader->ReadBlob(i);
    REQUIRE_FALSE(b.has_value());
    RequireInjectedIoError(b.error(), true);
  }
}

TEST_CASE("reader: a flipped bit anywhere is corruption, never data", "[fault][reader]") {
  const auto& file = Checkpoint();
  int open_failures = 0, verify_failures = 0;
  for (uint64_t at = 0; at < file.size(); at += (at < 256 || at + 512 > file.size()) ? 1 : 61) {
    FaultPlan plan;
    plan.fault = Fault::kBitFlip;
    plan.offset_begin = at;
    plan.offset_end = at + 1;
    auto r = OpenFaulty(Injector(plan));
    INFO("flip at offset " << at);
    if (!r.has_value()) {
      INFO(r.error().ToString());
      CHECK(r.error().code() == StatusCode::kCorrupt);
      ++open_failures;
      continue;
    }
    Status v = (*r)->VerifyAll();
    INFO(v.ToString());
    REQUIRE(v.code() == StatusCode::kCorrupt);
    ++verify_failures;
  }
  CHECK(open_failures > 0);
  CHECK(verify_failures > 0);
}

TEST_CASE("reader: a block damaged only on its first read is read again and verifies", "[fault][reader]") {
  auto plain = CheckpointReader::Open(NewMemoryFile("ckpt.hlt", Checkpoint()));
  REQUIRE(plain.has_value());
  const auto blocks = (*plain)->blocks();
  REQUIRE(blocks.size() >= 4);
  for (uint32_t target : {uint32_t(0), uint32_t(3), uint32_t(blocks.size() - 1)}) {
    INFO("block " << target);
    FaultPlan plan;
    plan.fault = Fault::kBitFlip;
    plan.offset_begin = blocks[target].offset + blocks[target].stored_length / 2;
    plan.offset_end = plan.offset_begin + 1;
    plan.max_faults = 1;
    DYNAMIC_SECTION("ReadBlock (VerifyAll), block " << target) {
      auto inj = Injector(plan);
      auto reader = OpenThenArm(inj);
      Status v = reader->VerifyAll();
      INFO(v.ToString());
      CHECK(v.ok());
      CHECK(inj->faults_injected() == 1);
      CHECK(reader->blocks_reread() == 1);
    }
    DYNAMIC_SECTION("ReadBlocks, block " << target) {
      auto inj = Injector(plan);
      auto reader = OpenThenArm(inj);
      std::vector<uint32_t> ids;
      std::vector<std::vector<uint8_t>> outs;
      std::vector<std::span<uint8_t>> spans;
      for (uint32_t b = 0; b < blocks.size(); ++b) {
        ids.push_back(b);
        outs.emplace_back(blocks[b].raw_length());
      }
      for (auto& o : outs) spans.push_back(o);
      std::vector<Status> statuses(ids.size());
      Status first = reader->ReadBlocks(ids, spans, statuses);
      INFO(first.ToString());
      REQUIRE(first.ok());
      for (uint32_t b = 0; b < blocks.size(); ++b) {
        std::vector<uint8_t> want(blocks[b].raw_length());
        REQUIRE((*plain)->ReadBlock(b, want).ok());
        CHECK(outs[b] == want);
      }
      CHECK(inj->faults_injected() == 1);
      CHECK(reader->blocks_reread() == 1);
    }
  }
  SECTION("a flip on every read is still corruption, after exactly two reads") {
    FaultPlan plan;
    plan.fault = Fault::kBitFlip;
    plan.offset_begin = blocks[2].offset;
    plan.offset_end = blocks[2].offset + 1;
    auto inj = Injector(plan);
    auto reader = OpenThenArm(inj);
    std::vector<uint8_t> out(blocks[2].raw_length());
    bool reread = false;
    Status s = reader->ReadBlock(2, out, &reread);
    INFO(s.ToString());
    CHECK(s.code() == StatusCode::kCorrupt);
    CHECK_THAT(s.message(), Catch::Contains("ckpt.hlt: block 2 at offset") && Catch::Contains("checksum mismatch") &&
                                Catch::Contains("also when read again"));
    CHECK(inj->operations() == 2);
    CHECK_FALSE(reread);
    CHECK(reader->blocks_reread() == 0);
  }
}

TEST_CASE("writer: a failed append at any point commits nothing", "[fault][writer]") {
  // Count the appends of a clean run.
  std::vector<uint8_t> out;
  auto counter = Injector(FaultPlan{});
  REQUIRE(WriteTo(NewFaultInjectingSink(NewMemorySink("ckpt.hlt", &out), counter), "/tmp").ok());
  REQUIRE(out == Checkpoint());
  const uint64_t appends = counter->operations() - 1;  // the last operation is Commit
  REQUIRE(appends >= 4);
  for (bool permanent : {false, true}) {
    for (uint64_t k = 1; k <= appends; ++k) {
      out.clear();
      FaultPlan plan;
      plan.on_call = k;
      plan.permanent = permanent;
      Status s = WriteTo(NewFaultInjectingSink(NewMemorySink("ckpt.hlt", &out), Injector(plan)), "/tmp");
      INFO("EIO on append " << k << ": " << s.ToString());
      CHECK(s.code() == StatusCode::kIoError);
      CHECK(s.retryable() == !permanent);
      CHECK(out.empty());
    }
  }
}

TEST_CASE("writer: short writes and a failed sync commit nothing", "[fault][writer]") {
  const uint64_t size = Checkpoint().size();
  std::vector<uint8_t> out;
  for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(63), uint64_t(64), uint64_t(65), size / 3, size / 2,
                     size - 65, size - 64, size - 63, size - 1}) {
    out.clear();
    FaultPlan plan;
    plan.fault = Fault::kShortTransfer;
    plan.after_bytes = n;
    Status s = WriteTo(NewFaultInjectingSink(NewMemorySink("ckpt.hlt", &out), Injector(plan)), "/tmp");
    INFO("short write after " << n << " bytes: " << s.ToString());
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(out.empty());
  }
  FaultPlan plan;
  plan.fault = Fault::kFailedSync;
  Status s = WriteTo(NewFaultInjectingSink(NewMemorySink("ckpt.hlt", &out), Injector(plan)), "/tmp");
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(out.empty());
}

TEST_CASE("writer: a torn write gives a file every reader rejects", "[fault][writer]") {
  const uint64_t size = Checkpoint().size();
  std::vector<uint8_t> out;
  for (uint64_t n = 0; n < size; n += (n < 200 || n + 200 > size) ? 7 : 997) {
    out.clear();
    FaultPlan plan;
    plan.fault = Fault::kTornWrite;
    plan.after_bytes = n;
    REQUIRE(WriteTo(NewFaultInjectingSink(NewMemorySink("ckpt.hlt", &out), Injector(plan)), "/tmp").ok());
    REQUIRE(out.size() == n);  // the lie: acknowledged, not written
    auto r = CheckpointReader::Open(NewMemoryFile("torn.hlt", out));
    INFO("torn after " << n << " bytes");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kCorrupt);
  }
}

TEST_CASE("writer over the real atomic sink: a failure leaves the directory as it was", "[fault][writer]") {
  testing::TempDir dir, staging;
  const std::string path = dir.File("ckpt.hlt");
  const std::vector<uint8_t> previous = {'o', 'l', 'd'};
  for (bool with_previous : {false, true}) {
    for (bool uring : {false, true}) {
      std::vector<FaultPlan> plans;
      for (uint64_t k : {1, 2, 5, 9}) {
        FaultPlan p;
        p.on_call = k;
        plans.push_back(p);
      }
      for (uint64_t n : {uint64_t(10), Checkpoint().size() / 2, Checkpoint().size() - 10}) {
        FaultPlan p;
        p.fault = Fault::kShortTransfer;
        p.after_bytes = n;
        plans.push_back(p);
      }
      FaultPlan sync;
      sync.fault = Fault::kFailedSync;
      plans.push_back(sync);
      for (const auto& plan : plans) {
        if (with_previous) Spit(path, previous);
        FileSinkOptions so;
        so.use_io_uring = uring;
        auto sink = CreateAtomicFileSink(path, so);
        REQUIRE(sink.has_value());
        Status s = WriteTo(NewFaultInjectingSink(std::move(*sink), Injector(plan)), staging.path());
        INFO(FaultName(plan.fault) << ", uring " << uring << ", previous " << with_previous << ": " << s.ToString());
        CHECK(s.code() == StatusCode::kIoError);
        if (with_previous) {
          CHECK(ListDirectory(dir.path()) == std::vector<std::string>{"ckpt.hlt"});
          CHECK(ReadWholeFile(path) == previous);
        } else {
          CHECK(ListDirectory(dir.path()).empty());
        }
      }
      // And the same sink without faults publishes the file.
      auto sink = CreateAtomicFileSink(path, FileSinkOptions{uring, true});
      REQUIRE(sink.has_value());
      REQUIRE(WriteTo(NewFaultInjectingSink(std::move(*sink), Injector(FaultPlan{})), staging.path()).ok());
      CHECK(ReadWholeFile(path) == Checkpoint());
      CHECK(ListDirectory(dir.path()) == std::vector<std::string>{"ckpt.hlt"});
      ::unlink(path.c_str());
    }
  }
}

TEST_CASE("writer over the real atomic sink: a real write failure (file size limit) leaves nothing", "[fault][writer]") {
  testing::TempDir dir, images;
  const std::string image = images.File("ram.img");
  REQUIRE(testing::WriteSyntheticImage(image, 8 << 20, 3).ok());
  const std::string path = dir.File("ckpt.hlt");
  const std::vector<uint8_t> previous = {'o', 'l', 'd'};
  for (bool uring : {false, true}) {
    for (bool with_previous : {false, true}) {
      if (with_previous) Spit(path, previous);
      pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        // Child: writes fail with EFBIG past 256 KiB (SIGXFSZ ignored), as on a full disk.
        ::signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {256 << 10, 256 << 10};
        ::setrlimit(RLIMIT_FSIZE, &lim);
        WriterOptions o;
        o.threads = 1;
        o.dictionary = DictionaryMode::kOff;
        o.sink.use_io_uring = uring;
        auto w = CheckpointWriter::Create(path, o);
        if (!w) ::_exit(3);
        auto r = (*w)->AddRegion("ram", 0, 8 << 20);
        if (!r || !(*w)->AttachImage(*r, image).ok()) ::_exit(4);
        auto sum = (*w)->Finish();
        if (sum.has_value()) ::_exit(1);
        ::_exit(sum.error().code() == StatusCode::kIoError ? 0 : 2);
      }
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      INFO("uring " << uring << ", previous " << with_previous);
      REQUIRE(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
      if (with_previous) {
        CHECK(ListDirectory(dir.path()) == std::vector<std::string>{"ckpt.hlt"});
        CHECK(ReadWholeFile(path) == previous);
        ::unlink(path.c_str());
      } else {
        CHECK(ListDirectory(dir.path()).empty());
      }
    }
  }
}
