// Fuzz target: writer -> reader round trip of fuzzer-chosen pages, hints, blobs and options.
//
// The input is a small program: writer options, then regions, then operations (put a page, put zero pages, give
// access or VA runs, add a blob). Calls the writer refuses must fail with kInvalidArgument; everything it
// accepts must come back: the checkpoint (written to a memory sink) opens, verifies, and every page reads back
// as given (absent and zero pages as zeros, a page given twice as its last copy), blobs and metadata too, the
// working set holds the accessed pages, and with a key the file authenticates (and fails with another key).
// Then, when the input goes on, a child of that checkpoint (format-spec 12): each page kept, partly rewritten (what
// a writer codes against the parent, 5.4 BASED), replaced, zeroed or dropped, coded against the parent or not; the
// chain opens, verifies, reads back page for page, and a whole read of its block groups reads each block once.
#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include "fuzz_input.h"
#include "halite/authentication.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"

namespace {

using namespace halite;
constexpr size_t kPage = 4096;
constexpr uint64_t kMaxPages = 160;

#define EXPECT_REFUSED(status)                                                        \
  do {                                                                                \
    Status s_ = (status);                                                             \
    FUZZ_CHECK_MSG(s_.ok() || s_.code() == StatusCode::kInvalidArgument, s_.ToString()); \
  } while (0)

// Page content from a few bytes of input: zero, a fill byte, a short repeated pattern, an earlier page, or
// pseudo-random (incompressible) bytes.
std::vector<uint8_t> MakePage(fuzz::FuzzInput& in, const std::vector<std::vector<uint8_t>>& earlier) {
  std::vector<uint8_t> p(kPage, 0);
  switch (in.U8() % 5) {
    case 0: break;
    case 1: std::fill(p.begin(), p.end(), in.U8()); break;
    case 2: {
      auto pat = in.Bytes(in.Range(1, 16));
      for (size_t i = 0; i < kPage && !pat.empty(); ++i) p[i] = pat[i % pat.size()];
      p[in.U16() % kPage] ^= in.U8();
      break;
    }
    case 3:
      if (!earlier.empty()) p = earlier[in.U16() % earlier.size()];
      break;
    case 4: {
      uint64_t x = in.U64() | 1;
      for (auto& b : p) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b = uint8_t(x);
      }
      break;
    }
  }
  return p;
}

bool IsZero(const std::vector<uint8_t>& p) {
  return std::all_of(p.begin(), p.end(), [](uint8_t v) { return v == 0; });
}

// Coding options the writer chooses from, or fixed: frames (auto, one frame, 1..32 pages) and the dictionary.
void FuzzCoding(fuzz::FuzzInput& in, WriterOptions* opt) {
  const uint8_t f = in.U8();
  opt->frame_pages = f < 128 ? WriterOptions::kFramePagesAuto : f < 160 ? 0 : uint32_t(f % 32 + 1);
  opt->dictionary = DictionaryMode(in.U8() % 3);
}

// The child phase (see the top of this file). `parent` is the checkpoint just written and checked; `expect` what its
// pages read as (nullopt: absent).
void ChildRoundTrip(fuzz::FuzzInput& in, const std::vector<uint8_t>& parent, const WriterOptions& given,
                    const std::vector<Region>& regions, const std::vector<std::optional<std::vector<uint8_t>>>& expect) {
  ReaderOptions ro;
  ro.mac_key = given.mac_key;
  ro.open_parent = [&parent](const std::string& path) -> Result<std::unique_ptr<RandomAccessFile>> {
    if (path != "fuzz.hlt") return Status::IoError(path + ": no such file", 2);
    return NewMemoryFile("fuzz.hlt", parent);
  };
  auto p = CheckpointReader::Open(NewMemoryFile("fuzz.hlt", parent), ro);
  FUZZ_CHECK_MSG(p.has_value(), p.error().ToString());
  WriterOptions opt;
  opt.block_pages = uint32_t(in.Range(1, 64));
  opt.threads = unsigned(in.Range(1, 2));
  opt.mac_key = given.mac_key;
  opt.sink.sync = false;
  opt.parent = std::shared_ptr<const CheckpointReader>(std::move(*p));
  opt.parent_path_hint = "fuzz.hlt";
  opt.code_against_parent = in.Bool();
  opt.parent_rewrite_fraction = in.Bool() ? 2.0 : 0.25;
  FuzzCoding(in, &opt);
  std::vector<uint8_t> file;
  auto created = CheckpointWriter::Create(NewMemorySink("child.hlt", &file), opt);
  FUZZ_CHECK_MSG(created.has_value(), created.error().ToString());
  CheckpointWriter& w = **created;
  for (const Region& r : regions) FUZZ_CHECK(w.AddRegion(r.name, r.guest_phys_base, r.size, r.host_page_size).has_value());
  std::vector<std::optional<std::vector<uint8_t>>> want(expect.size());
  for (uint32_t ri = 0; ri < regions.size(); ++ri) {
    for (uint64_t page = 0; page < regions[ri].page_count(); ++page) {
      const uint64_t g = regions[ri].first_page + page;
      std::vector<uint8_t> content = expect[g] ? *expect[g] : std::vector<uint8_t>(kPage, 0);
      switch (in.U8() % 6) {
        case 0: case 1: want[g] = expect[g]; break;  // kept (absent stays absent)
        case 2: {                                     // partly rewritten: 8 bytes in every 64
          const uint8_t v = in.U8() | 1;
          for (size_t at = 0; at < kPage; at += 64) std::fill_n(content.begin() + long(at), 8, v);
          want[g] = content;
          break;
        }
        case 3: want[g] = MakePage(in, {}); break;
        case 4: want[g] = std::vector<uint8_t>(kPage, 0); break;
        default: want[g] = std::nullopt; break;
      }
      if (want[g]) FUZZ_CHECK(w.PutPage(ri, page, *want[g]).ok());
    }
  }
  auto summary = w.Finish();
  FUZZ_CHECK_MSG(summary.has_value(), summary.error().ToString());
  auto opened = CheckpointReader::Open(NewMemoryFile("child.hlt", file), ro);
  FUZZ_CHECK_MSG(opened.has_value(), opened.error().ToString());
  const CheckpointReader& rd = **opened;
  Status v = rd.VerifyAll();
  FUZZ_CHECK_MSG(v.ok(), v.ToString());
  if (!opt.code_against_parent) FUZZ_CHECK(summary->based_blocks == 0);
  std::vector<uint8_t> page(kPage);
  const std::vector<uint8_t> zero(kPage, 0);
  for (uint64_t g = 0; g < want.size(); ++g) {
    FUZZ_CHECK(rd.ReadPage(g, page).ok());
    FUZZ_CHECK(page == (want[g] ? *want[g] : zero));
  }
  // Each block of the chain once: a read of every group fetches exactly the blocks the view's groups are made of.
  const uint64_t before = rd.read_stats().blocks_fetched;
  uint64_t parts = 0;
  std::vector<uint8_t> raw;
  for (uint32_t b = 0; b < rd.blocks().size(); ++b) {
    raw.resize(rd.blocks()[b].raw_length());
    FUZZ_CHECK(rd.ReadBlock(b, raw).ok());
    const auto group = rd.GroupParts(b);
    parts += group.size();
    FUZZ_CHECK(!group.front().based);
    for (const BlockMember& m : rd.BlockMembers(b)) {
      FUZZ_CHECK(std::equal(raw.begin() + long(m.slot) * long(kPage), raw.begin() + long(m.slot + 1) * long(kPage),
                            want[m.page]->begin()));
    }
  }
  FUZZ_CHECK(rd.read_stats().blocks_fetched - before == parts);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  WriterOptions opt;
  uint8_t bp = in.U8();
  opt.block_pages = bp < 240 ? bp % 64 + 1 : bp == 255 ? 4096 : uint32_t(bp - 239) * 16;
  opt.level = int(in.Range(0, 16)) - 7;
  opt.threads = unsigned(in.Range(1, 2));
  opt.policy = LayoutPolicy(in.U8() % 4);
  opt.dictionary = DictionaryMode(in.U8() % 3);
  if (in.Bool()) FuzzCoding(in, &opt);
  opt.sink.sync = false;
  opt.metadata.vmm_kind = VmmKind(in.U8() % 4);
  auto uuid = in.Bytes(in.Bool() ? 16 : 0);
  std::copy(uuid.begin(), uuid.end(), opt.metadata.vm_uuid.begin());
  opt.metadata.machine_type = in.Printable(0, in.U8() % 32);
  opt.metadata.creator = in.Printable(0, in.U8() % 32);
  opt.deterministic = in.Bool();
  if (in.Bool()) opt.metadata.created_unix_ns = in.U64();
  if (in.Bool()) {
    FileId id{};
    auto b = in.Bytes(16);
    std::copy(b.begin(), b.end(), id.begin());
    opt.file_id = id;
  }
  if (in.Bool()) {
    MacKey key{};
    auto b = in.Bytes(32);
    std::copy(b.begin(), b.end(), key.begin());
    opt.mac_key = key;
  }
  const WriterOptions given = opt;

  std::vector<uint8_t> file;
  auto created = CheckpointWriter::Create(NewMemorySink("fuzz.hlt", &file), opt);
  if (!created) {
    FUZZ_CHECK_MSG(created.error().code() == StatusCode::kInvalidArgument, created.error().ToString());
    return 0;
  }
  CheckpointWriter& w = **created;

  // Regions.
  std::vector<Region> regions;
  uint64_t total = 0;
  const uint64_t region_count = in.Range(1, 3);
  for (uint64_t i = 0; i < region_count; ++i) {
    std::string name = in.Printable(1, in.U8() % 12 + 1);
    uint64_t base = in.Range(0, 1 << 20) * kPage;
    uint32_t hps = uint32_t(kPage) << in.Range(0, 2);
    uint64_t units = in.Range(1, 48 * kPage / hps);
    uint64_t bytes = units * hps;
    if (total + bytes / kPage > kMaxPages) break;
    auto r = w.AddRegion(name, base, bytes, hps);
    if (!r) {
      FUZZ_CHECK_MSG(r.error().code() == StatusCode::kInvalidArgument, r.error().ToString());
      continue;
    }
    FUZZ_CHECK(*r == regions.size());
    regions.push_back(Region{name, base, bytes, hps, total});
    total += bytes / kPage;
  }

  // Operations, with the expected content of every page.
  std::vector<std::optional<std::vector<uint8_t>>> expect(total);
  std::vector<std::vector<uint8_t>> given_pages;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> blobs;
  std::set<uint64_t> accessed;
  const uint64_t ops = in.Range(0, 255);
  for (uint64_t op = 0; op < ops && !in.empty() && !regions.empty(); ++op) {
    uint8_t kind = in.U8() % 8;
    uint32_t r = uint32_t(in.U8() % (regions.size() + (kind == 7 ? 1 : 0)));  // kind 7: maybe a bad region
    uint64_t pages = r < regions.size() ? regions[r].page_count() : 1;
    uint64_t page = in.Range(0, pages - 1 + (in.U8() == 0xff ? 2 : 0));   // rarely out of range
    uint64_t count = in.Range(1, 8);
    bool in_range = r < regions.size() && page < pages && count <= pages - page;
    switch (kind) {
      case 0: case 1: case 2: case 7: {
        auto p = MakePage(in, given_pages);
        Status s = w.PutPage(r, page, p);
        if (r < regions.size() && page < pages) {
          FUZZ_CHECK_MSG(s.ok(), s.ToString());
          expect[regions[r].first_page + page] = p;
          if (!IsZero(p)) given_pages.push_back(p);
        } else {
          FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument);
        }
        break;
      }
      case 3: {
        Status s = w.PutZeroPages(r, page, count);
        if (in_range) {
          FUZZ_CHECK_MSG(s.ok(), s.ToString());
          for (uint64_t i = 0; i < count; ++i) expect[regions[r].first_page + page + i] = std::vector<uint8_t>(kPage, 0);
        } else {
          FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument);
        }
        break;
      }
      case 4: case 5: {
        PageRun run{PageRef{r, page}, count, 0};
        Status s = kind == 4 ? w.AddAccessedPages(std::span(&run, 1)) : w.AddVaRuns(std::span(&run, 1));
        if (in_range) {
          FUZZ_CHECK_MSG(s.ok(), s.ToString());
          if (kind == 4) {
            for (uint64_t i = 0; i < count; ++i) accessed.insert(regions[r].first_page + page + i);
          }
        } else {
          FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument);
        }
        break;
      }
      case 6: {
        std::string name = in.Printable(1, in.U8() % 8 + 1);
        std::vector<uint8_t> blob;
        size_t n = in.U16() % 3000;
        uint8_t mode = in.U8();
        for (size_t i = 0; i < n; ++i) blob.push_back(mode & 1 ? uint8_t(i * mode) : uint8_t((i * 2654435761u) >> 13));
        Status s = w.AddBlob(name, blob);
        bool duplicate = std::any_of(blobs.begin(), blobs.end(), [&](auto& b) { return b.first == name; });
        FUZZ_CHECK_MSG(s.ok() != duplicate, s.ToString());
        EXPECT_REFUSED(s);
        if (s.ok()) blobs.emplace_back(name, std::move(blob));
        break;
      }
    }
  }

  auto summary = w.Finish();
  if (regions.empty()) {
    FUZZ_CHECK(!summary.has_value() && summary.error().code() == StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK_MSG(summary.has_value(), summary.error().ToString());
  FUZZ_CHECK(summary->file_bytes == file.size());
  FUZZ_CHECK(summary->pages == total);

  // Read back.
  ReaderOptions ro;
  ro.mac_key = given.mac_key;
  auto opened = CheckpointReader::Open(NewMemoryFile("fuzz.hlt", file), ro);
  FUZZ_CHECK_MSG(opened.has_value(), opened.error().ToString());
  const CheckpointReader& rd = **opened;
  Status v = rd.VerifyAll();
  FUZZ_CHECK_MSG(v.ok(), v.ToString());
  FUZZ_CHECK(rd.authenticated() == given.mac_key.has_value());
  if (given.file_id) FUZZ_CHECK(rd.file_id() == *given.file_id);
  FUZZ_CHECK(rd.metadata().vmm_kind == given.metadata.vmm_kind);
  FUZZ_CHECK(rd.metadata().vm_uuid == given.metadata.vm_uuid);
  FUZZ_CHECK(rd.metadata().machine_type == given.metadata.machine_type);
  FUZZ_CHECK(rd.metadata().creator == given.metadata.creator);
  if (given.metadata.created_unix_ns != 0 || given.deterministic) {
    FUZZ_CHECK(rd.metadata().created_unix_ns == given.metadata.created_unix_ns);
  }
  FUZZ_CHECK(rd.regions() == regions);
  FUZZ_CHECK(rd.total_pages() == total);

  std::vector<uint8_t> page(kPage);
  const std::vector<uint8_t> zero(kPage, 0);
  uint64_t stored = 0;
  for (uint64_t g = 0; g < total; ++g) {
    PageLocation loc = rd.Locate(g);
    if (!expect[g]) {
      FUZZ_CHECK(loc.kind == PageKind::kAbsent);
    } else if (IsZero(*expect[g])) {
      FUZZ_CHECK(loc.kind == PageKind::kZero);
    } else {
      FUZZ_CHECK(loc.kind == PageKind::kStored);
      ++stored;
    }
    Status s = rd.ReadPage(g, page);
    FUZZ_CHECK_MSG(s.ok(), s.ToString());
    FUZZ_CHECK(page == (expect[g] ? *expect[g] : zero));
  }
  FUZZ_CHECK(summary->stored_pages + summary->duplicate_pages == stored);

  // The working set: accessed stored pages sit in HOT blocks (policies that use the access trace), and a HOT
  // block holds only accessed content, widened to whole host pages: a page of a host page larger than 4 KiB brings
  // its whole host page (format-spec 5.2: the restorer installs it at once), so its neighbours are hot too.
  bool uses_access = given.policy == LayoutPolicy::kHalite || given.policy == LayoutPolicy::kAccess;
  std::set<uint64_t> accessed_host_pages;
  for (uint64_t g : accessed) {
    for (const Region& reg : regions) {
      if (g < reg.first_page || g >= reg.first_page + reg.page_count()) continue;
      const uint64_t per_host = reg.host_page_size / kPage;
      const uint64_t first = reg.first_page + (g - reg.first_page) / per_host * per_host;
      for (uint64_t p = first; p < first + per_host && p < reg.first_page + reg.page_count(); ++p) {
        accessed_host_pages.insert(p);
      }
    }
  }
  for (uint64_t g : accessed) {
    PageLocation loc = rd.Locate(g);
    if (loc.kind == PageKind::kStored) FUZZ_CHECK(rd.blocks()[loc.block].hot() == uses_access);
  }
  // A block holds at most block_pages pages, rounded up to whole host pages: a host page larger than the block
  // size still goes into one block (keep_host_pages_whole, format-spec 10). A region of 8 KiB host pages with
  // block_pages 1 gave 2-page blocks, which the bound without host pages called a failure.
  uint64_t host_unit = 1;
  if (given.keep_host_pages_whole) {
    for (const auto& reg : rd.regions()) host_unit = std::max<uint64_t>(host_unit, reg.host_page_size / kPage);
  }
  const uint64_t max_block_pages = (uint64_t(given.block_pages) + host_unit - 1) / host_unit * host_unit;
  for (uint32_t b = 0; b < rd.blocks().size(); ++b) {
    FUZZ_CHECK(rd.blocks()[b].page_count <= max_block_pages);
    if (!rd.blocks()[b].hot()) continue;
    FUZZ_CHECK(uses_access);
    std::vector<bool> slot_accessed(rd.blocks()[b].page_count);
    for (const auto& m : rd.BlockMembers(b)) {
      if (accessed_host_pages.count(m.page)) slot_accessed[m.slot] = true;
    }
    FUZZ_CHECK(std::all_of(slot_accessed.begin(), slot_accessed.end(), [](bool a) { return a; }));
  }

  FUZZ_CHECK(rd.blobs().size() == blobs.size());
  for (const auto& [name, bytes] : blobs) {
    auto b = rd.ReadBlob(name);
    FUZZ_CHECK_MSG(b.has_value(), b.error().ToString());
    FUZZ_CHECK(*b == bytes);
  }

  if (given.mac_key) {
    ReaderOptions wrong;
    wrong.mac_key = *given.mac_key;
    wrong.mac_key->at(0) ^= 1;
    auto bad = CheckpointReader::Open(NewMemoryFile("fuzz.hlt", file), wrong);
    FUZZ_CHECK(!bad.has_value() && bad.error().code() == StatusCode::kAuthFailed);
  }
  if (!in.empty() && in.Bool()) ChildRoundTrip(in, file, given, regions, expect);
  return 0;
}
