// Huge-page-backed RAM (2 MiB host pages, hugetlbfs) restored lazily through the push channel, against a scripted
// destination that loads pages the way QEMU 7.2's ram_load_postcopy does for such a block: it gathers the 4 KiB
// records of one host page in a temporary page and places it when it has counted 512 of them, fails on a record
// of another page in between ("Non-same host page detected"), and so would place early with stale bytes if a
// page came twice. The source side is the real thing: RestoreEngine -> ChannelSink -> PushRestoreChannel.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "halite/bytes.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/qemu/qemu_stream_input.h"
#include "halite/qemu/qemu_channel_sink.h"
#include "halite/qemu/qemu_push_source.h"
#include "halite/restore_engine.h"
#include "halite/storage.h"
#include "qemu_test_streams.h"

namespace halite::qemu {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kHuge = 2 << 20;
constexpr uint64_t kUnit = kHuge / kPage;  // 512
constexpr uint64_t kHostPages = 6;
constexpr uint64_t kRamPages = kHostPages * kUnit;
constexpr uint64_t kBiosPages = 8;

// pc.ram's content, by host page: 0 all stored; 1 a few stored pages among zeros; 2 all zero; 3 stored pages, then
// absent ones, then zeros; 4 and 5 all stored. pc.bios: all stored.
bool RamPageStored(uint64_t p) {
  const uint64_t hp = p / kUnit, i = p % kUnit;
  switch (hp) {
    case 1:
      return i % 61 == 7;
    case 2:
      return false;
    case 3:
      return i < 100;
    default:
      return true;
  }
}
bool RamPageAbsent(uint64_t p) { return p / kUnit == 3 && p % kUnit >= 100 && p % kUnit < 150; }
uint8_t Fill(uint32_t block, uint64_t page) { return static_cast<uint8_t>(page * 13 + block * 101 + 1) | 1; }

SavedVmState HugeState() {
  SavedVmState s;
  s.configuration = std::string("\x07\x00\x00\x00\x0dpc-i440fx-7.2", 18);
  s.machine_type = "pc-i440fx-7.2";
  s.ram_section_id = 2;
  s.ram_blocks = {{"pc.ram", kRamPages * kPage, kHuge, 0}, {"pc.bios", kBiosPages * kPage, kPage, 0}};
  s.device_state = testing::SampleDeviceState();
  return s;
}

std::vector<uint8_t> HugeCheckpoint() {
  std::vector<uint8_t> bytes;
  WriterOptions o;
  o.sink.sync = false;
  o.deterministic = true;
  o.threads = 2;
  o.block_pages = 64;
  auto w = CheckpointWriter::Create(NewMemorySink("huge.hlt", &bytes), o);
  REQUIRE(w.has_value());
  REQUIRE((*w)->AddRegion("pc.ram", 0, kRamPages * kPage, kHuge).has_value());
  REQUIRE((*w)->AddRegion("pc.bios", 0xfffc0000, kBiosPages * kPage).has_value());
  std::vector<uint8_t> page(kPage);
  for (uint64_t p = 0; p < kRamPages; ++p) {
    if (RamPageAbsent(p)) continue;
    std::memset(page.data(), RamPageStored(p) ? Fill(0, p) : 0, kPage);
    REQUIRE((*w)->PutPage(0, p, page).ok());
  }
  for (uint64_t p = 0; p < kBiosPages; ++p) {
    std::memset(page.data(), Fill(1, p), kPage);
    REQUIRE((*w)->PutPage(1, p, page).ok());
  }
  REQUIRE((*w)->Finish().has_value());
  return bytes;
}

void Rp(int fd, uint16_t type, const std::string& payload) {
  std::string b;
  PutBe16(&b, type);
  PutBe16(&b, static_cast<uint16_t>(payload.size()));
  b += payload;
  (void)!send(fd, b.data(), b.size(), MSG_NOSIGNAL);
}

struct Ask {
  const char* block;
  uint64_t offset;
  uint32_t length;
};

std::string Request(const Ask& a) {
  std::string q;
  PutBe64(&q, a.offset);
  PutBe32(&q, a.length);
  PutU8(&q, static_cast<uint8_t>(strlen(a.block)));
  q += a.block;
  return q;
}

struct Placed {
  Status status;
  std::set<uint64_t> host_pages;       // pc.ram host pages placed
  std::set<uint64_t> bios_pages;       // pc.bios pages placed
  uint64_t zero_records = 0;
  uint64_t advise_summary = 0;
  uint64_t mem_size_page_size = 0;     // pc.ram's entry in the RAM START block list
  bool discard_aligned = false;
};

// QEMU 7.2's postcopy loader, as far as these rules go. Answers the PINGs, asks for `asks` after the package, and
// sends SHUT 0 at EOF when every rule held.
void HugeDestination(int fd, Placed* r, std::vector<Ask> asks) {
  FdSource src(fd, FdSourceOptions{"return path", 0, 10000});
  StreamInput in(&src, "fake destination");
  auto fail = [&](const std::string& m) {
    if (r->status.ok()) r->status = Status::Corrupt(m);
    shutdown(fd, SHUT_RDWR);
  };
  std::string tmp;
  int last_block = -1;
  // The temporary huge page: how many records it counted, which host page, which pages, their bytes.
  uint64_t target_pages = 0, host_page = 0;
  std::set<uint64_t> have;
  std::vector<uint8_t> huge(kHuge);
  if (!in.Need(8 + 18, "header").has_value()) return fail("no header");
  in.Consume(8 + 18);
  for (;;) {
    auto tag = in.U8("tag");
    if (!tag.has_value()) return fail(tag.error().message());
    if (*tag == 0x00) break;
    if (*tag == 0x08) {
      const uint16_t cmd = *in.Be16("cmd");
      const uint16_t len = *in.Be16("len");
      tmp.clear();
      (void)in.Bytes(len, "payload", &tmp);
      const auto* u = reinterpret_cast<const uint8_t*>(tmp.data());
      if (cmd == 2) Rp(fd, 2, tmp);                        // PING -> PONG
      if (cmd == 3) r->advise_summary = LoadBe64(u);       // POSTCOPY_ADVISE
      if (cmd == 6 && tmp.compare(2, 6, "pc.ram") == 0) {  // discard: version, len, name, NUL, (start, length)...
        r->discard_aligned = true;
        for (size_t at = 2 + 6 + 1; at + 16 <= tmp.size(); at += 16) {
          if (LoadBe64(u + at) % kHuge != 0 || LoadBe64(u + at + 8) % kHuge != 0) r->discard_aligned = false;
        }
      }
      if (cmd == 7) {
        const uint32_t n = LoadBe32(u);
        std::string pkg;
        (void)in.Bytes(n, "package", &pkg);
        Rp(fd, 2, pkg.substr(10, 4));                   // the PING after LISTEN
        Rp(fd, 2, pkg.substr(pkg.size() - 9 - 5 + 5, 4));  // the PING before RUN
        for (const Ask& a : asks) Rp(fd, 3, Request(a));
      }
      continue;
    }
    if (*tag == 0x01) {
      // RAM START: be64 total | MEM_SIZE, then per block u8 name length, name, be64 length, and for a block whose
      // page size differs from the host's (postcopy advised) a be64 page size; then EOS and the footer.
      (void)in.Be32("id");
      (void)in.Bytes(1 + 3 + 4 + 4, "name, instance, version", &tmp);
      uint64_t left = *in.Be64("total") & ~0xfffull;
      while (left > 0) {
        const uint8_t nlen = *in.U8("nlen");
        tmp.clear();
        (void)in.Bytes(nlen, "name", &tmp);
        const uint64_t used = *in.Be64("used");
        if (tmp == "pc.ram") r->mem_size_page_size = *in.Be64("page size");
        left -= std::min(left, used);
      }
      (void)in.Be64("eos");
      (void)in.Bytes(5, "footer", &tmp);
      continue;
    }
    if (*tag != 0x02 && *tag != 0x03) return fail("unexpected tag " + std::to_string(*tag));
    (void)in.Be32("id");
    for (;;) {
      const uint64_t w = *in.Be64("record");
      const uint64_t flags = w & 0xfff;
      if (flags == 0x10) break;
      if (!(flags & 0x20)) {
        const uint8_t nlen = *in.U8("nlen");
        tmp.clear();
        (void)in.Bytes(nlen, "name", &tmp);
        last_block = tmp == "pc.ram" ? 0 : 1;
      }
      const uint64_t page = (w & ~0xfffull) / kPage;
      const bool zero = flags & 0x02;
      std::vector<uint8_t> bytes(kPage, 0);
      if (zero) {
        ++r->zero_records;
        if (*in.U8("fill") != 0) return fail("a ZERO record with a non-zero fill");
      } else {
        auto d = in.Need(kPage, "data");
        std::memcpy(bytes.data(), d.value(), kPage);
        in.Consume(kPage);
      }
      if (last_block == 1) {
        if (!r->bios_pages.insert(page).second) return fail("pc.bios page sent twice: File exists");
        if (bytes[0] != Fill(1, page)) return fail("bad pc.bios page");
        continue;
      }
      // pc.ram: the temporary huge page.
      ++target_pages;
      if (target_pages == 1) {
        host_page = page / kUnit;
        have.clear();
        std::fill(huge.begin(), huge.end(), 0xEE);  // what is left from before: stale bytes
      } else if (page / kUnit != host_page) {
        return fail("Non-same host page detected: host page " + std::to_string(host_page) + ", received page " +
                    std::to_string(page) + " after " + std::to_string(target_pages - 1) + " of its pages");
      }
      have.insert(page % kUnit);
      std::memcpy(huge.data() + (page % kUnit) * kPage, bytes.data(), kPage);
      if (target_pages == kUnit) {
        if (have.size() != kUnit) return fail("host page " + std::to_string(host_page) + " placed with pages missing");
        if (!r->host_pages.insert(host_page).second) return fail("host page placed twice: File exists");
        for (uint64_t i = 0; i < kUnit; ++i) {
          const uint64_t p = host_page * kUnit + i;
          const uint8_t want = RamPageStored(p) ? Fill(0, p) : 0;
          if (huge[i * kPage] != want || huge[i * kPage + kPage - 1] != want) {
            return fail("host page " + std::to_string(host_page) + " placed with wrong bytes at page " +
                        std::to_string(p));
          }
        }
        target_pages = 0;
      }
    }
    (void)in.Bytes(5, "footer", &tmp);
  }
  if (target_pages != 0) return fail("the stream ended inside a host page");
  std::string s;
  PutBe32(&s, 0);
  Rp(fd, 1, s);
  shutdown(fd, SHUT_RDWR);
}

struct Restore {
  Placed placed;
  Status status;
  PushRestoreStats channel;
  RestoreEngineStats engine;
  uint64_t handled = 0;
};

// A lazy restore of the huge checkpoint through the real engine and sink; the destination asks for `asks`.
Restore RunRestore(const std::vector<Ask>& asks, bool loader) {
  Restore out;
  const SavedVmState state = HugeState();
  auto reader = CheckpointReader::Open(NewMemoryFile("huge.hlt", HugeCheckpoint()));
  REQUIRE(reader.has_value());
  REQUIRE((*reader)->regions()[0].host_page_size == kHuge);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  std::thread dest(HugeDestination, sv[1], &out.placed, asks);
  RestoreEngine* engine = nullptr;
  std::atomic<uint64_t> handled{0};
  std::atomic<int> requests_seen{0};
  PushRestoreChannel ch(sv[0], state, PushRestoreOptions{}, [&](PageId id) -> Status {
    ++handled;
    return engine->HandleFault(PageRef{id.block, id.page}).status();
  });
  ChannelSink sink(&ch, {0, 1});
  RestoreEngineOptions eo;
  eo.background_loader = loader;
  if (!loader) eo.idle_sweep_ms = 300;  // what the guest never asked for goes once it is quiet
  auto e = RestoreEngine::Create(**reader, sink, eo);
  REQUIRE(e.has_value());
  engine = e->get();
  Status s = ch.Begin();
  if (s.ok()) s = ch.StartGuest();
  if (s.ok() && !loader) {
    // Let the requests be served before anything else moves.
    for (int i = 0; i < 500 && ch.requests() < asks.size(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (s.ok()) s = engine->Start();
  if (s.ok()) s = engine->WaitForLoader();
  if (s.ok()) s = ch.Finish();
  if (!s.ok()) ch.Abort(s);
  engine->Stop();
  ch.StopThreads();
  dest.join();
  close(sv[0]);
  close(sv[1]);
  out.status = s;
  out.channel = ch.stats();
  out.engine = engine->Stats();
  out.handled = handled.load();
  (void)requests_seen;
  return out;
}

}  // namespace

TEST_CASE("huge pages: every host page goes whole, its zero pages as ZERO records, once, QEMU's rules hold",
          "[push][hugepage]") {
  // Whole host pages, as QEMU asks; one request inside a host page for one page (rounded up by the source); one
  // for the all-zero host page; one for a pc.bios page.
  const std::vector<Ask> asks = {{"pc.ram", 1 * kHuge, uint32_t(kHuge)},
                                 {"pc.ram", 3 * kHuge + 120 * kPage, uint32_t(kPage)},
                                 {"pc.ram", 2 * kHuge, uint32_t(kHuge)},
                                 {"pc.bios", 3 * kPage, uint32_t(kPage)}};
  for (bool loader : {false, true}) {
    INFO("loader " << loader);
    Restore r = RunRestore(asks, loader);
    INFO("source: " << r.status.ToString() << " / destination: " << r.placed.status.ToString());
    REQUIRE(r.placed.status.ok());
    REQUIRE(r.status.ok());
    // ADVISE carries the page sizes' summary; pc.ram's block-list entry its page size; discards whole host pages.
    CHECK(r.placed.advise_summary == (kHuge | kPage));
    CHECK(r.placed.mem_size_page_size == kHuge);
    CHECK(r.placed.discard_aligned);
    // Every host page with a stored page was placed, and the zero one that was asked for; every pc.bios page.
    CHECK(r.placed.host_pages == std::set<uint64_t>{0, 1, 2, 3, 4, 5});
    CHECK(r.placed.bios_pages.size() == kBiosPages);
    // Zero and absent pages inside sent host pages went as ZERO records: host page 1's, all of 2, 3's tail.
    uint64_t zeros = 0;
    for (uint64_t p = 0; p < kRamPages; ++p) zeros += RamPageStored(p) ? 0 : 1;
    CHECK(r.placed.zero_records == zeros);
    CHECK(r.channel.zero_pages == zeros);
    CHECK(r.channel.requests == asks.size());
    CHECK(r.channel.request_sizes == std::map<uint64_t, uint64_t>{{kPage, 2}, {kHuge, 2}});
    CHECK(r.engine.host_pages_installed == kHostPages);
    CHECK(r.engine.host_page_extra_reads == 0);
    if (!loader) {
      // Before the idle sweep only what was asked for moved: whole host pages 1, 2, 3, and pc.bios's block.
      CHECK(r.channel.request_pages == 3 * kUnit + kBiosPages);
    }
  }
}

TEST_CASE("huge pages: a section refuses to break up a host page, before writing", "[push][hugepage]") {
  const SavedVmState state = HugeState();
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  std::thread drain([&] {
    char buf[65536];
    while (read(sv[1], buf, sizeof buf) > 0) {
    }
  });
  {
    PushRestoreChannel ch(sv[0], state, PushRestoreOptions{}, [](PageId) { return Status::Ok(); });
    REQUIRE(ch.Begin().ok());
    std::vector<uint8_t> data(kUnit * kPage, 1);
    SECTION("a run that begins inside a host page") {
      const uint64_t before = ch.stats(false).bytes_sent;
      Status s = ch.SendPages(PageId{0, 5}, 1, data.data());
      CHECK(s.code() == StatusCode::kInternal);
      CHECK(s.message().find("begin inside a 2048 KiB host page") != std::string::npos);
      CHECK_FALSE(ch.IsSent(PageId{0, 5}));
      CHECK(ch.stats(false).bytes_sent == before);
      CHECK_FALSE(ch.failed());
    }
    SECTION("another page inside an open host page") {
      auto section = ch.OpenSection();
      REQUIRE(section.has_value());
      REQUIRE((*section)->AddPages(PageId{0, 0}, 10, data.data()).ok());
      Status s = (*section)->AddPages(PageId{1, 0}, 1, data.data());
      CHECK(s.code() == StatusCode::kInternal);
      CHECK(s.message().find("would go inside the 2048 KiB host page at page 0 of RAMBlock pc.ram") !=
            std::string::npos);
      CHECK((*section)->AddZeroPages(PageId{0, 11}, 1).code() == StatusCode::kInternal);  // 10 is next
      CHECK_FALSE(ch.IsSent(PageId{1, 0}));
      // Closing it with the host page unfinished fails the channel: QEMU holds a part it cannot complete.
      CHECK((*section)->Close().code() == StatusCode::kInternal);
      CHECK(ch.failed());
    }
    SECTION("a whole host page in runs, zero runs among them, then the next: fine") {
      auto section = ch.OpenSection();
      REQUIRE(section.has_value());
      REQUIRE((*section)->AddPages(PageId{0, 0}, 100, data.data()).ok());
      REQUIRE((*section)->AddZeroPages(PageId{0, 100}, 400).ok());
      REQUIRE((*section)->AddPages(PageId{0, 500}, 12, data.data()).ok());
      REQUIRE((*section)->AddPages(PageId{1, 0}, 2, data.data()).ok());
      REQUIRE((*section)->AddZeroPages(PageId{0, kUnit}, 2 * kUnit).ok());  // two host pages in one run
      REQUIRE((*section)->Close().ok());
      CHECK(ch.pages_sent() == 3 * kUnit + 2);
      CHECK_FALSE(ch.failed());
    }
    ch.Abort(Status::Aborted("test over"));
    ch.StopThreads();
  }
  shutdown(sv[0], SHUT_RDWR);
  drain.join();
  close(sv[0]);
  close(sv[1]);
}

}  // namespace halite::qemu
