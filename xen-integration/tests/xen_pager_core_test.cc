// The lazy pager's logic against an in-memory stand-in for the hypervisor's paging interface. This is as far as
// the pager can be tested here: no hypervisor with CONFIG_MEM_PAGING is available (see pager/README.md).
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "halite/checkpoint_reader.h"
#include "halite/xen/xen_checkpoint.h"
#include "halite/xen/xen_stream_reader.h"
#include "xen_pager_core.h"
#include "xen_synth_guest.h"
#include "xen_test_dump.h"

using namespace halite;
using namespace halite::xen;
using namespace halite::xen::pager;

namespace {

// Models what Xen's mem_paging does to a gfn: resident with content, or paged out; some pages in use.
class FakeXen final : public PagingOps {
 public:
  std::map<uint64_t, std::vector<uint8_t>> resident;  // gfn -> content
  std::set<uint64_t> paged, busy;
  std::vector<PagingRequest> responses;
  uint64_t loads = 0;

  Result<bool> Evict(uint64_t gfn) override {
    if (busy.count(gfn)) return false;
    if (!resident.count(gfn)) return Status::IoError("evict of a gfn that is not resident");
    resident.erase(gfn);
    paged.insert(gfn);
    return true;
  }
  Status Load(uint64_t gfn, const uint8_t* page) override {
    if (!paged.count(gfn)) return Status::IoError("prep of a gfn that is not paged out (ENOENT)");
    paged.erase(gfn);
    resident[gfn].assign(page, page + kPageSize);
    ++loads;
    return Status::Ok();
  }
  Status Write(uint64_t gfn, const uint8_t* page) override {
    if (!resident.count(gfn)) return Status::IoError("foreign write of a gfn that is not resident");
    resident[gfn].assign(page, page + kPageSize);
    return Status::Ok();
  }
  Status Respond(const PagingRequest& r) override {
    responses.push_back(r);
    return Status::Ok();
  }
};

struct Fixture {
  std::string dir, ckpt;
  std::vector<uint8_t> stream;
  Fixture() {
    char tmpl[] = "/tmp/hlt-xen-pager.XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    dir = tmpl;
    ckpt = dir + "/g.hlt";
    const uint64_t pages = 32768;
    testing::SynthLinuxGuest guest(pages, 12);
    VectorSink sink;
    testing::SynthGuestPageSource source(guest);
    REQUIRE(ExportSaveStream(testing::MakeSynthGuestImage(pages, guest.vcpus()), source, sink).ok());
    stream = sink.Take();
    std::string in = dir + "/g.xl";
    FILE* f = std::fopen(in.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(std::fwrite(stream.data(), 1, stream.size(), f) == stream.size());
    std::fclose(f);
    int fd = ::open(in.c_str(), O_RDONLY);
    SaveOptions o;
    o.writer.sink.sync = false;
    o.writer.threads = 2;
    o.read.source_name = in;
    auto r = SaveStreamToCheckpoint(fd, ckpt, o);
    ::close(fd);
    INFO(r.status().ToString());
    REQUIRE(r);
  }
  ~Fixture() { std::system(("rm -rf '" + dir + "'").c_str()); }
};

}  // namespace

TEST_CASE("xen pager: evict, fault in whole blocks, load the rest in restore order", "[xen][pager]") {
  Fixture fx;
  auto reader = CheckpointReader::Open(fx.ckpt);
  REQUIRE(reader);
  const CheckpointReader& r = **reader;
  const uint64_t pages = r.regions()[0].page_count();

  // The skeleton restore left every named pfn resident and zero; some pages are held by a backend.
  FakeXen xen;
  std::vector<uint8_t> zero(kPageSize, 0);
  for (uint64_t gfn = 0; gfn < pages; ++gfn) {
    if (r.Locate(gfn).kind != PageKind::kAbsent) xen.resident[gfn] = zero;
  }
  std::vector<uint64_t> stored;
  for (uint64_t gfn = 0; gfn < pages; ++gfn) {
    if (r.Locate(gfn).kind == PageKind::kStored) stored.push_back(gfn);
  }
  REQUIRE(stored.size() > 1000);
  xen.busy = {stored[3], stored[500], stored[501]};
  for (uint64_t gfn : xen.busy) xen.resident[gfn] = zero;

  auto core = PagerCore::Create(r, xen);
  REQUIRE(core);
  PagerCore& pc = **core;
  REQUIRE(pc.EvictAll().ok());
  CHECK(pc.stats().stored_pages == stored.size());
  CHECK(pc.stats().evicted == stored.size() - 3);
  CHECK(pc.stats().written_unevictable == 3);
  CHECK(pc.paged_out() == stored.size() - 3);
  std::vector<uint8_t> want(kPageSize);
  REQUIRE(r.ReadPage(stored[500], want).ok());
  CHECK(xen.resident[stored[500]] == want);

  // The guest touches a page: its whole block comes in, then the vCPU is answered.
  const uint64_t touched = stored[1234];
  const uint32_t block = r.Locate(touched).block;
  REQUIRE(pc.OnRequest(PagingRequest{touched, 1, 1, false, false}).ok());
  REQUIRE(xen.responses.size() == 1);
  CHECK(xen.responses[0].gfn == touched);
  CHECK(xen.responses[0].vcpu_id == 1);
  CHECK(xen.responses[0].flags == 1);
  CHECK(pc.stats().fault_blocks == 1);
  CHECK(pc.stats().fault_pages == r.BlockMembers(block).size());
  for (const BlockMember& m : r.BlockMembers(block)) CHECK(!xen.paged.count(m.page));
  // Again for the same block (another vCPU raced): answered, nothing loaded.
  const uint64_t loads = xen.loads;
  REQUIRE(pc.OnRequest(PagingRequest{r.BlockMembers(block).back().page, 0, 1, false, false}).ok());
  CHECK(xen.loads == loads);
  CHECK(pc.stats().requests_for_loaded == 1);
  // A page the guest gave back (ballooning) is never loaded.
  uint64_t dropped = 0;
  for (uint64_t gfn : stored) {
    if (xen.paged.count(gfn)) {
      dropped = gfn;
      break;
    }
  }
  REQUIRE(pc.OnRequest(PagingRequest{dropped, 0, 1, true, false}).ok());
  CHECK(pc.stats().dropped == 1);

  // The loader brings in the rest, each block once.
  uint64_t blocks = 0;
  for (;;) {
    auto more = pc.LoadNextBlock();
    REQUIRE(more);
    if (!*more) break;
    ++blocks;
  }
  CHECK(pc.done());
  CHECK(xen.paged.size() == 1);  // the dropped page
  CHECK(blocks <= r.blocks().size());
  CHECK(xen.loads == stored.size() - 3 - 1);
  // Every page the guest sees is the checkpoint's.
  for (uint64_t gfn : stored) {
    if (gfn == dropped) continue;
    REQUIRE(r.ReadPage(gfn, want).ok());
    REQUIRE(xen.resident.count(gfn));
    CHECK(xen.resident[gfn] == want);
  }
}

TEST_CASE("xen pager: the skeleton stream keeps records and batches and carries no page data", "[xen][pager]") {
  Fixture fx;
  auto reader = CheckpointReader::Open(fx.ckpt);
  REQUIRE(reader);
  VectorSink skel;
  REQUIRE(ExportSkeleton(**reader, skel).ok());
  CHECK(skel.data().size() < fx.stream.size() / 100);

  testing::MemoryPageStore full_store, skel_store;
  MemorySource full_src(fx.stream), skel_src(skel.data());
  auto full = ImportSaveStream(full_src, full_store, ReadOptions{});
  auto lazy = ImportSaveStream(skel_src, skel_store, ReadOptions{});
  REQUIRE(full);
  REQUIRE(lazy);
  CHECK(lazy->libxc_records == full->libxc_records);
  CHECK(lazy->libxl_records == full->libxl_records);
  CHECK(lazy->config == full->config);
  REQUIRE(lazy->pages.batch_count() == full->pages.batch_count());
  auto full_state = full_store.State(), lazy_state = skel_store.State();
  REQUIRE(full_state.size() == lazy_state.size());
  for (const auto& [pfn, st] : full_state) {
    const PageType want = PageTypeHasData(uint8_t(st.first)) ? PageType::kXalloc : st.first;
    CHECK(lazy_state.at(pfn).first == want);
  }
  // A checkpoint of another kind is refused.
  CHECK(MakeLazySkeleton(*full).pages.entry_count() == full->pages.entry_count());
}
