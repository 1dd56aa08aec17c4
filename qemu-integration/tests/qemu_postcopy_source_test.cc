// RunPostcopyRestore against a scripted destination: a small parser of the postcopy stream on the other end of
// a socketpair that answers PINGs, asks for pages after RUN and sends SHUT at EOF, checking every page arrives
// exactly once.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <set>
#include <algorithm>
#include <thread>

#include "halite/qemu/qemu_byte_io.h"
#include "halite/qemu/qemu_restore_source.h"
#include "qemu_test_streams.h"

namespace halite::qemu {
namespace {

constexpr uint64_t kRamPages = 1024;
constexpr uint64_t kBiosPages = 16;

SavedVmState MakeState() {
  SavedVmState s;
  s.configuration = std::string("\x07\x00\x00\x00\x0dpc-i440fx-7.2", 18);
  s.machine_type = "pc-i440fx-7.2";
  s.ram_section_id = 2;
  s.ram_blocks = {{"pc.ram", kRamPages * 4096, 4096, 0}, {"pc.bios", kBiosPages * 4096, 4096, 0}};
  s.device_state = testing::SampleDeviceState();
  return s;
}

uint8_t Fill(PageId id) { return static_cast<uint8_t>(id.page * 7 + id.block + 1); }
bool IsZero(PageId id) { return id.page % 3 == 0; }

class Source : public RestorePageSource {
 public:
  Status ReadPage(PageId id, uint8_t* out, bool* zero) override {
    if (!read_.emplace(id.block * 1000000 + id.page).second) return Status::Internal("read twice");
    *zero = IsZero(id);
    if (!*zero) memset(out, Fill(id), 4096);
    return Status::Ok();
  }
  bool NextPushRun(PageRun* run) override {
    if (hints_.empty()) return false;
    *run = hints_.front();
    hints_.erase(hints_.begin());
    return true;
  }
  void OnPageRequested(PageId page) override { requested_.push_back(page); }
  std::vector<PageRun> hints_;
  std::vector<PageId> requested_;
  std::set<uint64_t> read_;
};

struct DestResult {
  Status status;
  std::vector<PageId> order;           // page records in arrival order
  size_t pages_before_package = 0;     // records before PACKAGED (the preload)
  size_t pages_at_requests = 0;        // records received when the requests were sent
  bool listen_first = false, run_last = false, discard_seen = false, advise_seen = false;
  std::string device_state;
};

// The scripted destination. Sends REQ_PAGES_ID(pc.ram page 500), REQ_PAGES(page 500 again), REQ_PAGES_ID(pc.bios
// page 3) after RUN, then SHUT 0 at EOF.
void Destination(int fd, DestResult* r) {
  FdSource src(fd, 10000);
  StreamInput in(&src, "fake destination");
  auto fail = [&](const std::string& m) { r->status = Status::Corrupt(m); };
  auto rp = [&](uint16_t type, const std::string& payload) {
    std::string b;
    PutBe16(&b, type);
    PutBe16(&b, static_cast<uint16_t>(payload.size()));
    b += payload;
    (void)!send(fd, b.data(), b.size(), MSG_NOSIGNAL);
  };
  std::map<std::string, uint32_t> block_index{{"pc.ram", 0}, {"pc.bios", 1}};
  std::set<std::pair<uint32_t, uint64_t>> seen;
  int last_block = -1;
  std::string tmp;
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
      if (cmd == 2) rp(2, tmp);  // PONG
      if (cmd == 3) r->advise_seen = true;
      if (cmd == 6) r->discard_seen = true;
      if (cmd == 7) {
        r->pages_before_package = r->order.size();
        const uint32_t n = LoadBe32(reinterpret_cast<const uint8_t*>(tmp.data()));
        std::string pkg;
        (void)in.Bytes(n, "package", &pkg);
        r->listen_first = pkg.compare(0, 5, std::string("\x08\x00\x04\x00\x00", 5)) == 0;
        r->run_last = pkg.compare(pkg.size() - 5, 5, std::string("\x08\x00\x05\x00\x00", 5)) == 0;
        r->device_state = pkg.substr(5, pkg.size() - 5 - 9 - 5);
        const std::string ping = pkg.substr(pkg.size() - 9 - 5 + 5, 4);
        rp(2, ping);
        r->pages_at_requests = r->order.size();
        std::string q;
        PutBe64(&q, 500 * 4096);
        PutBe32(&q, 4096);
        PutU8(&q, 6);
        q += "pc.ram";
        rp(3, q);
        std::string q2;
        PutBe64(&q2, 500 * 4096);
        PutBe32(&q2, 4096);
        rp(4, q2);
        std::string q3;
        PutBe64(&q3, 3 * 4096);
        PutBe32(&q3, 4096);
        PutU8(&q3, 7);
        q3 += "pc.bios";
        rp(3, q3);
      }
      continue;
    }
    if (*tag == 0x01) {  // RAM START: id, "ram", instance, version, MEM_SIZE list, EOS, footer
      (void)in.Bytes(4 + 1 + 3 + 4 + 4 + 8 + (1 + 6 + 8) + (1 + 7 + 8) + 8 + 5, "start", &tmp);
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
        last_block = static_cast<int>(block_index.at(tmp));
      }
      const PageId id{static_cast<uint32_t>(last_block), (w & ~0xfffull) / 4096};
      if (!seen.emplace(id.block, id.page).second) return fail("page sent twice");
      if (flags & 0x02) {
        if (*in.U8("fill") != 0 || !IsZero(id)) return fail("bad zero page");
      } else {
        auto d = in.Need(4096, "data");
        if (IsZero(id) || d.value()[0] != Fill(id) || d.value()[4095] != Fill(id)) return fail("bad page data");
        in.Consume(4096);
      }
      r->order.push_back(id);
    }
    (void)in.Bytes(5, "footer", &tmp);
  }
  if (seen.size() != kRamPages + kBiosPages) return fail("missing pages: " + std::to_string(seen.size()));
  std::string shut;
  PutBe32(&shut, 0);
  rp(1, shut);
  shutdown(fd, SHUT_RDWR);
}

TEST_CASE("postcopy driver: preload, requests, hints, every page once, SHUT", "[postcopy]") {
  const SavedVmState state = MakeState();
  Source src;
  src.hints_ = {PageRun{PageId{0, 900}, 100}, PageRun{PageId{0, 950}, 100}};  // overlapping and past the block end
  PostcopyRestoreOptions opts;
  opts.preload = {PageRun{PageId{0, 100}, 10}, PageRun{PageId{1, 0}, 4}};
  opts.push_section_pages = 32;
  opts.request_run_pages = 64;
  opts.push_rate_limit_bytes_per_sec = 32u << 20;  // ~130 ms for everything: the requests arrive mid-push
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  DestResult dr;
  std::thread dest(Destination, sv[1], &dr);
  PostcopyRestoreStats st;
  Status s = RunPostcopyRestore(sv[0], state, src, opts, &st);
  dest.join();
  close(sv[0]);
  close(sv[1]);
  INFO(s.ToString() + " / destination: " + dr.status.ToString());
  REQUIRE(s.ok());
  REQUIRE(dr.status.ok());
  REQUIRE(dr.advise_seen);
  REQUIRE(dr.discard_seen);
  REQUIRE(dr.listen_first);
  REQUIRE(dr.run_last);
  REQUIRE(dr.device_state == state.device_state);
  // Preload before the package, in the given order.
  REQUIRE(dr.pages_before_package == 14);
  REQUIRE(dr.order[0] == PageId{0, 100});
  REQUIRE(dr.order[10] == PageId{1, 0});
  REQUIRE(st.preload_pages == 14);
  // Requests: three messages, the second for a page already on its way.
  REQUIRE(st.requests == 3);
  REQUIRE(st.requests_already_sent >= 1);
  REQUIRE(src.requested_.size() == 3);
  REQUIRE(src.requested_[0] == PageId{0, 500});
  REQUIRE(src.requested_[2] == PageId{1, 3});
  // The request's run is the aligned 64-page group around page 500 (448..511), the faulting page first.
  auto pos = std::find(dr.order.begin(), dr.order.end(), PageId{0, 500}) - dr.order.begin();
  REQUIRE(dr.order[pos + 1] == PageId{0, 448});
  // The first pushed pages after the package follow the hints (900..; the second hint overlaps and runs past the block end).
  auto from_request = [](PageId id) { return (id.block == 0 && id.page >= 448 && id.page < 512) || id.block == 1; };
  auto first_push = std::find_if(dr.order.begin() + 14, dr.order.end(), [&](PageId id) { return !from_request(id); });
  REQUIRE(*first_push == PageId{0, 900});
  REQUIRE(st.preload_pages + st.request_pages + st.pushed_pages == kRamPages + kBiosPages);
  REQUIRE(st.connect_to_running_us > 0);
  REQUIRE(src.read_.size() == kRamPages + kBiosPages);
}

TEST_CASE("postcopy driver reports a failed load (SHUT 1)", "[postcopy]") {
  const SavedVmState state = MakeState();
  Source src;
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  std::thread dest([&] {
    char buf[4096];
    (void)!read(sv[1], buf, sizeof(buf));  // take the prologue, then fail like QEMU does
    std::string shut;
    PutBe16(&shut, 1);
    PutBe16(&shut, 4);
    PutBe32(&shut, 1);
    (void)!send(sv[1], shut.data(), shut.size(), MSG_NOSIGNAL);
    shutdown(sv[1], SHUT_RDWR);
  });
  PostcopyRestoreStats st;
  Status s = RunPostcopyRestore(sv[0], state, src, PostcopyRestoreOptions{}, &st);
  dest.join();
  close(sv[0]);
  close(sv[1]);
  INFO(s.ToString());
  REQUIRE(s.code() == StatusCode::kAborted);
  REQUIRE(s.message().find("SHUT 1") != std::string::npos);
}

}  // namespace
}  // namespace halite::qemu
