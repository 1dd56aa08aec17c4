// DirectUffdSink against userfaultfd-registered memory: this process's own, and a forked "QEMU" whose
// userfaultfd is duplicated with pidfd_getfd as hlt-restore does with the real one. Only pages already placed are
// ever read (a read of a missing page of a registered range would wait for a fault handler nobody runs).
#include "halite/qemu/qemu_direct_placement.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "halite/userfaultfd_ops.h"

namespace halite::qemu {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kPages = 64;

std::vector<uint8_t> Pages(uint64_t first, uint64_t count) {
  std::vector<uint8_t> v(count * kPage);
  for (uint64_t i = 0; i < count; ++i) std::memset(v.data() + i * kPage, int((first + i) * 3 + 1), kPage);
  return v;
}

bool PageIs(const uint8_t* p, uint8_t value) {
  for (uint64_t i = 0; i < kPage; ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

// Registered anonymous memory of this process, or why not (the test is then skipped, loudly).
struct Registered {
  explicit Registered(uint64_t pages = kPages) : pages(pages) {
    auto fd = uffd::Open();
    if (!fd) {
      why_not = fd.error().message();
      return;
    }
    uffd_fd = UniqueFd(*fd);
    void* m = mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    mem = static_cast<uint8_t*>(m);
    Status s = uffd::Register(uffd_fd.get(), mem, pages * kPage);
    if (!s.ok()) why_not = s.message();
  }
  ~Registered() {
    // The userfaultfd first: it asks for UNMAP events, and nobody reads them (munmap would wait for one).
    uffd_fd.reset();
    if (mem != nullptr) munmap(mem, pages * kPage);
  }
  uint64_t pages;
  UniqueFd uffd_fd;
  uint8_t* mem = nullptr;
  std::string why_not;
};

}  // namespace

TEST_CASE("direct sink: runs copied and zero-mapped, EEXIST counted, a partial copy continued", "[direct]") {
  Registered r;
  if (!r.why_not.empty()) {
    WARN("SKIPPED: no userfaultfd here: " << r.why_not);
    return;
  }
  // Region 0 is placed directly; region 1 is not (it stays on the channel).
  DirectUffdSink sink(r.uffd_fd.get(), {DirectRegion{uint64_t(r.mem), kPages}, DirectRegion{0, 8}});
  CHECK(sink.IsDirect(0));
  CHECK_FALSE(sink.IsDirect(1));

  // Page 12 is populated by someone else before the run 8..15 arrives: the run is copied up to it (a partial
  // copy), the page is left as it is, and the rest follows.
  const std::vector<uint8_t> other(kPage, 0xEE);
  REQUIRE(uffd::Copy(r.uffd_fd.get(), uint64_t(r.mem) + 12 * kPage, other.data(), kPage, true).err == 0);
  const std::vector<uint8_t> a = Pages(8, 8);
  const std::vector<uint8_t> b = Pages(40, 4);
  const PageInstall batch[] = {{PageRef{0, 8}, 8, a}, {PageRef{0, 20}, 4, {}}, {PageRef{0, 40}, 4, b}};
  size_t runs = 0;
  REQUIRE(sink.Install(batch, InstallPriority::kUrgent, &runs).ok());
  CHECK(runs == 3);
  for (uint64_t p = 8; p < 16; ++p) {
    INFO("page " << p);
    CHECK(PageIs(r.mem + p * kPage, p == 12 ? 0xEE : uint8_t(p * 3 + 1)));
    CHECK(sink.IsPlaced(PageRef{0, p}));
  }
  for (uint64_t p = 20; p < 24; ++p) CHECK(PageIs(r.mem + p * kPage, 0));
  for (uint64_t p = 40; p < 44; ++p) CHECK(PageIs(r.mem + p * kPage, uint8_t(p * 3 + 1)));
  CHECK_FALSE(sink.IsPlaced(PageRef{0, 16}));
  const DirectPlacementStats st = sink.stats();
  CHECK(st.pages_copied == 11);
  CHECK(st.pages_existed == 1);
  CHECK(st.pages_zeroed == 4);
  CHECK(st.partial_fills == 1);
  CHECK(st.copy_ioctls == 4);  // 8..11 (a partial copy), 12 (EEXIST), 13..15; 40..43
  CHECK(st.zero_ioctls == 1);
  CHECK(st.wakes == 3);

  SECTION("a page placed twice is an internal error, nothing is written") {
    const std::vector<uint8_t> again = Pages(15, 2);
    const PageInstall twice[] = {{PageRef{0, 15}, 2, again}};
    Status s = sink.Install(twice, InstallPriority::kBackground, &runs);
    CHECK(s.code() == StatusCode::kInternal);
    CHECK(runs == 0);
    CHECK_FALSE(sink.IsPlaced(PageRef{0, 16}));
  }
  SECTION("a run of a region not placed directly, or outside its region, is refused") {
    const PageInstall other_region[] = {{PageRef{1, 0}, 1, {}}};
    CHECK(sink.Install(other_region, InstallPriority::kBackground, &runs).code() == StatusCode::kInvalidArgument);
    const PageInstall outside[] = {{PageRef{0, kPages - 1}, 2, {}}};
    CHECK(sink.Install(outside, InstallPriority::kBackground, &runs).code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("direct sink: a 2 MiB host page is put together from its runs and placed with one UFFDIO_COPY, zeros "
          "included", "[direct][hugepage]") {
  // hugetlbfs memory needs reserved huge pages; the kernel's rule (a whole, aligned huge page per UFFDIO_COPY, no
  // UFFDIO_ZEROPAGE) is met the same way on anonymous memory, which the sink here treats as 2 MiB host pages.
  // The real thing is qemu_guest_hugepages.
  constexpr uint64_t kUnit = 512;
  Registered r(3 * kUnit);
  if (!r.why_not.empty()) {
    WARN("SKIPPED: no userfaultfd here: " << r.why_not);
    return;
  }
  DirectUffdSink sink(r.uffd_fd.get(), {DirectRegion{uint64_t(r.mem), 3 * kUnit, kUnit * kPage}});
  size_t runs = 0;
  // Host page 0 as the engine gives it: stored pages, a zero run, stored pages.
  const std::vector<uint8_t> a = Pages(0, 100), b = Pages(400, 112);
  const PageInstall first[] = {{PageRef{0, 0}, 100, a}, {PageRef{0, 100}, 300, {}}, {PageRef{0, 400}, 112, b}};
  REQUIRE(sink.Install(first, InstallPriority::kUrgent, &runs).ok());
  CHECK(runs == 3);
  CHECK(sink.stats().copy_ioctls == 1);
  CHECK(sink.stats().zero_ioctls == 0);
  for (uint64_t p = 0; p < kUnit; ++p) {
    INFO("page " << p);
    CHECK(PageIs(r.mem + p * kPage, p >= 100 && p < 400 ? 0 : uint8_t(p * 3 + 1)));
    CHECK(sink.IsPlaced(PageRef{0, p}));
  }
  // An all-zero host page: copied from zeros (hugetlbfs has no UFFDIO_ZEROPAGE).
  const PageInstall zero[] = {{PageRef{0, kUnit}, kUnit, {}}};
  REQUIRE(sink.Install(zero, InstallPriority::kBackground, &runs).ok());
  CHECK(sink.stats().copy_ioctls == 2);
  CHECK(sink.stats().zero_ioctls == 0);
  CHECK(PageIs(r.mem + (kUnit + 7) * kPage, 0));
  CHECK(sink.stats().pages_copied == 2 * kUnit);

  SECTION("a run that begins inside a host page, or a batch that stops inside one, places nothing") {
    const std::vector<uint8_t> c = Pages(2 * kUnit + 5, 10);
    const PageInstall inside[] = {{PageRef{0, 2 * kUnit + 5}, 10, c}};
    Status s = sink.Install(inside, InstallPriority::kUrgent, &runs);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("begins inside a 2048 KiB host page") != std::string::npos);
    const PageInstall part[] = {{PageRef{0, 2 * kUnit}, 10, c}, {PageRef{0, 2 * kUnit + 10}, 20, {}}};
    s = sink.Install(part, InstallPriority::kUrgent, &runs);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("is not covered by the batch") != std::string::npos);
    CHECK(runs == 0);
    CHECK_FALSE(sink.IsPlaced(PageRef{0, 2 * kUnit}));
    CHECK(sink.stats().copy_ioctls == 2);
  }
  SECTION("a host page placed twice is an internal error") {
    const PageInstall again[] = {{PageRef{0, kUnit}, kUnit, {}}};
    CHECK(sink.Install(again, InstallPriority::kUrgent, &runs).code() == StatusCode::kInternal);
  }
  SECTION("one data run of a whole host page goes straight from it") {
    const std::vector<uint8_t> c = Pages(2 * kUnit, kUnit);
    const PageInstall whole[] = {{PageRef{0, 2 * kUnit}, kUnit, c}};
    REQUIRE(sink.Install(whole, InstallPriority::kUrgent, &runs).ok());
    CHECK(sink.stats().copy_ioctls == 3);
    CHECK(PageIs(r.mem + (2 * kUnit + 300) * kPage, uint8_t((2 * kUnit + 300) * 3 + 1)));
  }
}

TEST_CASE("direct sink: a forked 'QEMU' whose userfaultfd is duplicated with pidfd_getfd", "[direct]") {
  int to_child[2], from_child[2];
  REQUIRE(pipe(to_child) == 0);
  REQUIRE(pipe(from_child) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: registers its memory like QEMU at LISTEN, reports the address, waits, checks what it got.
    close(to_child[1]);
    close(from_child[0]);
    uint64_t address = 0;
    auto fd = uffd::Open();
    void* m = mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fd && m != MAP_FAILED && uffd::Register(*fd, m, kPages * kPage).ok()) address = uint64_t(m);
    if (write(from_child[1], &address, sizeof address) != sizeof address || address == 0) _exit(2);
    char go = 0;
    if (read(to_child[0], &go, 1) != 1) _exit(3);
    const uint8_t* mem = static_cast<const uint8_t*>(m);
    bool ok = true;
    for (uint64_t p = 0; p < 16; ++p) ok = ok && PageIs(mem + p * kPage, uint8_t(p * 3 + 1));
    for (uint64_t p = 16; p < 32; ++p) ok = ok && PageIs(mem + p * kPage, 0);
    _exit(ok ? 0 : 1);
  }
  close(to_child[0]);
  close(from_child[1]);
  uint64_t address = 0;
  REQUIRE(read(from_child[0], &address, sizeof address) == sizeof address);
  if (address == 0) {
    waitpid(pid, nullptr, 0);
    WARN("SKIPPED: the child could not register memory with a userfaultfd here");
    return;
  }
  auto uffd_copy = DuplicateUserfaultfd(pid);
  REQUIRE(uffd_copy.has_value());
  DirectUffdSink sink(uffd_copy->get(), {DirectRegion{address, kPages}});
  const std::vector<uint8_t> data = Pages(0, 16);
  const PageInstall batch[] = {{PageRef{0, 0}, 16, data}, {PageRef{0, 16}, 16, {}}};
  size_t runs = 0;
  REQUIRE(sink.Install(batch, InstallPriority::kUrgent, &runs).ok());
  CHECK(sink.stats().copy_ioctls == 1);  // the whole run in one ioctl
  CHECK(sink.stats().zero_ioctls == 1);
  REQUIRE(write(to_child[1], "g", 1) == 1);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // the child saw every page it was given
  // The owner is gone: placing more says so instead of pretending.
  const PageInstall late[] = {{PageRef{0, 40}, 1, {}}};
  Status s = sink.Install(late, InstallPriority::kUrgent, &runs);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("QEMU's memory is gone") != std::string::npos);
  close(to_child[1]);
  close(from_child[0]);
}

TEST_CASE("direct placement: a process without a userfaultfd, and one this process may not take from",
          "[direct]") {
  // This test process itself: it has no userfaultfd open (the other tests' are closed by now).
  auto none = DuplicateUserfaultfd(getpid());
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().code() == StatusCode::kNotFound);
  CHECK(CheckCanDuplicateFds(getpid()).ok());
  // pid 1 when this test runs as an ordinary user: no ptrace permission (as root it is permitted: not asserted).
  if (geteuid() != 0) {
    Status s = CheckCanDuplicateFds(1);
    CHECK(s.code() == StatusCode::kUnsupported);
    CHECK(s.message().find("ptrace permission") != std::string::npos);
  }
}

}  // namespace halite::qemu
