// A Linux-like x86-64 guest laid over the synthetic image's memory, for the page-table walk of `hlt-save xen`.
//
// Built from how Linux lays out an x86-64 address space (not from any Xen or Linux code): a kernel top-level
// table with the direct map of all memory in 2 MiB pages at 0xffff888000000000, kernel text in 2 MiB pages at
// 0xffffffff81000000, vmalloc'd kernel stacks in 4 KiB pages at 0xffffc90000000000 and the CPU entry area;
// processes whose top-level tables copy its kernel half (each an 8 KiB PTI pair: kernel copy, user copy), with
// text shared between processes of one binary, a shared libc, a private heap, stack and anonymous mappings
// (some of them transparent huge pages), all on physically scattered pages. vCPU 0 runs process 3 in kernel
// mode, vCPU 1 process 17 in user mode on its PTI user copy, both with PCIDs.
#ifndef HALITE_XEN_TESTS_XEN_SYNTH_GUEST_H_
#define HALITE_XEN_TESTS_XEN_SYNTH_GUEST_H_

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "halite/xen/xen_save_image.h"

namespace halite::xen::testing {

struct SynthVcpu {
  uint64_t cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
};

class SynthLinuxGuest {
 public:
  // `pages` of memory (at least 16384); processes stop being built when memory runs out.
  explicit SynthLinuxGuest(uint64_t pages, unsigned processes = 40);

  // The content of `pfn`: a page table where one lives, else SynthPage(pfn).
  void Page(uint64_t pfn, uint8_t* out) const;
  const std::vector<SynthVcpu>& vcpus() const { return vcpus_; }

  // What a correct walk finds.
  unsigned processes() const { return processes_; }
  uint64_t table_pages() const { return tables_.size(); }
  // Distinct pages mapped other than by the kernel's 2 MiB mappings (user halves, vmalloc, CPU entry area).
  uint64_t small_mapped_pages() const { return small_mapped_; }
  std::string Describe() const;

 private:
  uint64_t NewTable();
  uint64_t Entry(uint64_t table, size_t i) const;
  void SetEntry(uint64_t table, size_t i, uint64_t v);
  void Map(uint64_t root, uint64_t va, uint64_t pfn, int leaf_level);
  uint64_t TakeUserPage();

  uint64_t pages_;
  unsigned processes_ = 0;
  std::unordered_map<uint64_t, std::vector<uint8_t>> tables_;
  uint64_t next_table_;
  std::vector<uint64_t> user_pool_;
  size_t next_user_ = 0;
  std::vector<SynthVcpu> vcpus_;
  uint64_t small_mapped_ = 0;
};

// MakeSynthImage with long-mode vCPUs in the HVM context (one CPU record each).
XenSaveImage MakeSynthGuestImage(uint64_t pages, std::span<const SynthVcpu> vcpus);

class SynthGuestPageSource : public PageBatchSource {
 public:
  explicit SynthGuestPageSource(const SynthLinuxGuest& guest) : guest_(guest) {}
  Status ReadPages(std::span<const uint64_t> pfns, uint8_t* out) override;

 private:
  const SynthLinuxGuest& guest_;
};

}  // namespace halite::xen::testing

#endif  // HALITE_XEN_TESTS_XEN_SYNTH_GUEST_H_
