#include "xen_synth_guest.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "halite/bytes.h"
#include "halite/xen/xen_format.h"
#include "xen_test_dump.h"

namespace halite::xen::testing {
namespace {

constexpr uint64_t kP = 1, kRw = 2, kUs = 4, kA = 1u << 5, kD = 1u << 6, kPs = 1u << 7, kG = 1u << 8;
constexpr uint64_t kNx = 1ull << 63;
constexpr uint64_t kAddr = 0x000FFFFFFFFFF000ull;

constexpr uint64_t kTextPfn = 0x1000, kTextPages = 0x1000;       // 16 MiB of kernel image at 16 MiB
constexpr uint64_t kThpPfn = 0x2000, kThpChunks = 4;             // 2 MiB-aligned chunks for huge pages
constexpr uint64_t kTablePfn = 0x2800, kTableEnd = 0x3000;       // the page-table pool
constexpr uint64_t kUserPfn = 0x3000;                            // scattered pages from here up

constexpr uint64_t kDirectMap = 0xffff888000000000ull;
constexpr uint64_t kKernelText = 0xffffffff81000000ull;
constexpr uint64_t kVmalloc = 0xffffc90000000000ull;
constexpr uint64_t kCpuEntryArea = 0xfffffe0000000000ull;
constexpr uint64_t kUserText = 0x400000, kUserHeap = 0x1000000, kUserAnon = 0x7f0000000000ull;
constexpr uint64_t kUserThp = 0x7e0000000000ull, kUserLibc = 0x7f1234500000ull, kUserStack = 0x7ffffffde000ull;
constexpr uint64_t kLibcPages = 200, kBinaryPages = 48, kBinaries = 4, kStackPages = 8, kAnonPages = 64;

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

bool Normal(uint64_t pfn) { return SynthType(pfn) == PageType::kNormal; }

}  // namespace

SynthLinuxGuest::SynthLinuxGuest(uint64_t pages, unsigned processes) : pages_(pages), next_table_(kTablePfn) {
  // Physically scattered user memory: a deterministic shuffle (our own Fisher-Yates: std::shuffle's output is
  // not specified, and the image must be the same everywhere).
  for (uint64_t pfn = kUserPfn; pfn < pages; ++pfn) user_pool_.push_back(pfn);
  uint64_t seed = 0x5eed;
  for (size_t i = user_pool_.size(); i > 1; --i) std::swap(user_pool_[i - 1], user_pool_[SplitMix(seed) % i]);

  std::set<uint64_t> small;  // distinct pages mapped other than by the kernel's 2 MiB mappings
  const uint64_t kernel = NewTable();
  for (uint64_t pfn = 0; pfn < pages; pfn += 512) Map(kernel, kDirectMap + (pfn << 12), pfn, 2);
  for (uint64_t pfn = kTextPfn; pfn < kTextPfn + kTextPages && pfn < pages; pfn += 512) {
    Map(kernel, kKernelText + ((pfn - kTextPfn) << 12), pfn, 2);
  }
  // A 16 KiB vmalloc'd stack per process with a guard page; the CPU entry area of two vCPUs.
  std::vector<uint64_t> stacks;
  for (unsigned p = 0; p < processes; ++p) {
    for (uint64_t i = 0; i < 4; ++i) {
      uint64_t pfn = TakeUserPage();
      Map(kernel, kVmalloc + ((5 * uint64_t(p) + i) << 12), pfn, 1);
      small.insert(pfn);
    }
  }
  for (uint64_t i = 0; i < 16; ++i) {
    uint64_t pfn = TakeUserPage();
    Map(kernel, kCpuEntryArea + (i << 12), pfn, 1);
    small.insert(pfn);
  }

  std::vector<uint64_t> libc, binaries[kBinaries];
  for (uint64_t i = 0; i < kLibcPages; ++i) libc.push_back(TakeUserPage());
  std::vector<uint64_t> kernel_copies, user_copies;
  uint64_t thp_next = 0;
  for (unsigned p = 0; p < processes; ++p) {
    const uint64_t heap = 200 + (uint64_t(p) * 37) % 400;
    const uint64_t need = heap + kStackPages + kAnonPages + (binaries[p % kBinaries].empty() ? kBinaryPages : 0);
    if (user_pool_.size() - next_user_ < need + 16) break;
    next_table_ += next_table_ & 1;  // a PTI pair: kernel copy on an even pfn, user copy after it
    while (!Normal(next_table_) || !Normal(next_table_ + 1)) next_table_ += 2;
    const uint64_t pgd = NewTable(), user = NewTable();
    for (size_t i = 256; i < 512; ++i) SetEntry(pgd, i, Entry(kernel, i));
    auto& binary = binaries[p % kBinaries];
    if (binary.empty()) {
      for (uint64_t i = 0; i < kBinaryPages; ++i) binary.push_back(TakeUserPage());
    }
    auto map_user = [&](uint64_t va, uint64_t pfn) {
      Map(pgd, va, pfn, 1);
      small.insert(pfn);
    };
    for (uint64_t i = 0; i < kBinaryPages; ++i) map_user(kUserText + (i << 12), binary[i]);
    for (uint64_t i = 0; i < heap; ++i) map_user(kUserHeap + (i << 12), TakeUserPage());
    for (uint64_t i = 0; i < kAnonPages; ++i) map_user(kUserAnon + (i << 12), TakeUserPage());
    for (uint64_t i = 0; i < kLibcPages; ++i) map_user(kUserLibc + (i << 12), libc[i]);
    for (uint64_t i = 0; i < kStackPages; ++i) map_user(kUserStack + (i << 12), TakeUserPage());
    if (p % 8 == 0 && thp_next < kThpChunks && kThpPfn + 512 * (thp_next + 1) <= pages) {
      const uint64_t first = kThpPfn + 512 * thp_next++;
      Map(pgd, kUserThp, first, 2);
      for (uint64_t i = 0; i < 512; ++i) small.insert(first + i);
    }
    // The PTI user copy: the same user half, of the kernel half only the entry area.
    for (size_t i = 0; i < 256; ++i) SetEntry(user, i, Entry(pgd, i));
    SetEntry(user, 508, Entry(kernel, 508));
    kernel_copies.push_back(pgd);
    user_copies.push_back(user);
    ++processes_;
  }

  const uint64_t cr0 = (1ull << 31) | (1u << 16) | (1u << 5) | (1u << 4) | (1u << 1) | 1;  // PG WP NE ET MP PE
  const uint64_t cr4 = (1u << 5) | (1u << 7) | (1u << 9) | (1u << 10) | (1u << 17);       // PAE PGE OSFXSR .. PCIDE
  const uint64_t efer = (1u << 0) | (1u << 8) | (1u << 10) | (1u << 11);                  // SCE LME LMA NXE
  if (processes_ > 0) {
    const size_t a = std::min<size_t>(3, processes_ - 1), b = std::min<size_t>(17, processes_ - 1);
    vcpus_.push_back({cr0, (kernel_copies[a] << 12) | 3, cr4, efer});                         // kernel mode, PCID 3
    vcpus_.push_back({cr0, (1ull << 63) | (user_copies[b] << 12) | 0x800 | 17, cr4, efer});  // user mode, user PCID
  }
  for (uint64_t pfn : small) {
    std::vector<uint8_t> page(kPageSize);
    Page(pfn, page.data());
    bool zero = std::all_of(page.begin(), page.end(), [](uint8_t c) { return c == 0; });
    if (Normal(pfn) && !zero) ++small_mapped_;
  }
}

uint64_t SynthLinuxGuest::NewTable() {
  while (!Normal(next_table_)) ++next_table_;
  if (next_table_ >= kTableEnd || next_table_ >= pages_) std::abort();  // the pool is sized for 40 processes
  tables_[next_table_].assign(kPageSize, 0);
  return next_table_++;
}

uint64_t SynthLinuxGuest::Entry(uint64_t table, size_t i) const {
  return LoadLe64(tables_.at(table).data() + 8 * i);
}

void SynthLinuxGuest::SetEntry(uint64_t table, size_t i, uint64_t v) {
  StoreLe64(tables_.at(table).data() + 8 * i, v);
}

void SynthLinuxGuest::Map(uint64_t root, uint64_t va, uint64_t pfn, int leaf_level) {
  const bool user = !(va >> 63);
  uint64_t table = root;
  for (int level = 4; level > leaf_level; --level) {
    const size_t i = (va >> (12 + 9 * (level - 1))) & 511;
    uint64_t e = Entry(table, i);
    if (!(e & kP)) {
      e = (NewTable() << 12) | kP | kRw | kA | (user ? kUs : kD);
      SetEntry(table, i, e);
    }
    table = (e & kAddr) >> 12;
  }
  uint64_t leaf = (pfn << 12) | kP | kA | kD;
  if (leaf_level > 1) leaf |= kPs;
  if (user) {
    leaf |= kUs | ((va >= kUserText && va < kUserText + (kBinaryPages << 12)) ? 0 : kRw | kNx);
  } else {
    leaf |= kG | ((va >= kKernelText) ? 0 : kRw | kNx);
  }
  SetEntry(table, (va >> (12 + 9 * (leaf_level - 1))) & 511, leaf);
}

uint64_t SynthLinuxGuest::TakeUserPage() {
  while (next_user_ < user_pool_.size()) {
    uint64_t pfn = user_pool_[next_user_++];
    if (Normal(pfn)) return pfn;
  }
  std::abort();  // callers check the pool first
}

void SynthLinuxGuest::Page(uint64_t pfn, uint8_t* out) const {
  auto it = tables_.find(pfn);
  if (it != tables_.end()) {
    std::memcpy(out, it->second.data(), kPageSize);
  } else {
    SynthPage(pfn, out);
  }
}

std::string SynthLinuxGuest::Describe() const {
  return std::to_string(processes_) + " processes, " + std::to_string(tables_.size()) + " page-table pages, " +
         std::to_string(small_mapped_) + " non-zero pages mapped by processes, vmalloc and the CPU entry area, " +
         std::to_string(vcpus_.size()) + " vCPUs";
}

XenSaveImage MakeSynthGuestImage(uint64_t pages, std::span<const SynthVcpu> vcpus) {
  XenSaveImage image = MakeSynthImage(pages);
  std::vector<uint8_t> ctx;
  auto put16 = [&](uint16_t v) { PutLe16(&ctx, v); };
  auto put32 = [&](uint32_t v) { PutLe32(&ctx, v); };
  auto store64 = [&](size_t at, uint64_t v) { StoreLe64(&ctx[at], v); };
  put16(kHvmCodeHeader); put16(0); put32(kHvmSaveHeaderSize);
  put32(kHvmFileMagic); put32(kHvmFileVersion); put32(0); put32(0); put32(0x906ea); put32(2400000);
  for (size_t v = 0; v < vcpus.size(); ++v) {
    put16(kHvmCodeCpu); put16(uint16_t(v)); put32(kHvmHwCpuSize);
    const size_t cpu = ctx.size();
    ctx.resize(cpu + kHvmHwCpuSize, 0);
    store64(cpu + kHvmHwCpuRipOffset, 0xffffffff81000000ull + 0x1234 * (v + 1));
    store64(cpu + kHvmHwCpuCr0Offset, vcpus[v].cr0);
    store64(cpu + kHvmHwCpuCr3Offset, vcpus[v].cr3);
    store64(cpu + kHvmHwCpuCr4Offset, vcpus[v].cr4);
    store64(cpu + kHvmHwCpuEferOffset, vcpus[v].efer);
  }
  put16(kHvmCodeEnd); put16(0); put32(0);
  for (KeptRecord& r : image.libxc_records) {
    if (r.type == kLibxcHvmContext) r.body = ctx;
  }
  return image;
}

Status SynthGuestPageSource::ReadPages(std::span<const uint64_t> pfns, uint8_t* out) {
  for (size_t i = 0; i < pfns.size(); ++i) guest_.Page(pfns[i], out + i * kPageSize);
  return Status::Ok();
}

}  // namespace halite::xen::testing
