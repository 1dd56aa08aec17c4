// What hlt-save asks QEMU about the guest besides its migration stream: where each RAMBlock appears in
// guest-physical memory (`info mtree -f`) and the vCPUs' paging registers (`info registers -a`), the inputs of
// the guest page-table walk (halite/x86_page_tables.h). Both come from HMP through QMP human-monitor-command;
// their text is parsed here and nowhere else. Stateless; the parsers are exposed for tests.
#ifndef HALITE_QEMU_QEMU_GUEST_INFO_H_
#define HALITE_QEMU_QEMU_GUEST_INFO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halite/qemu/qemu_qmp_client.h"
#include "halite/status.h"

namespace halite::qemu {

// Guest-physical [gpa, gpa + size) shows RAMBlock memory region `block` from byte `offset` on. pc.ram of a 4 GiB
// i440fx guest, e.g., appears as [0, 3 GiB) at offset 0 (in pieces around the PAM ranges) and as [4 GiB, 5 GiB)
// at offset 3 GiB.
struct GuestRamRange {
  uint64_t gpa = 0;
  uint64_t size = 0;
  std::string block;  // the memory region's name (equal to the RAMBlock's for pc.ram, pc.bios, ...)
  uint64_t offset = 0;
  friend bool operator==(const GuestRamRange&, const GuestRamRange&) = default;
};

// Parses `info mtree -f`: the flat view whose address-space list names "memory", its `ram` and `rom` lines
// (I/O and romd regions are skipped). Ranges come out in ascending gpa order. Errors: corrupt when there is no
// such flat view or a line does not parse.
Result<std::vector<GuestRamRange>> ParseFlatViewRam(std::string_view text);
Result<std::vector<GuestRamRange>> QueryGuestRamMap(QmpClient& qmp);

// One vCPU's registers that decide its paging mode and root.
struct CpuPagingRegisters {
  int cpu = 0;
  uint64_t cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
  friend bool operator==(const CpuPagingRegisters&, const CpuPagingRegisters&) = default;
};

// Parses `info registers -a` (blocks starting with "CPU#N"; CR0=, CR3=, CR4= and EFER= fields). A block without
// all four fields is corrupt.
Result<std::vector<CpuPagingRegisters>> ParseInfoRegisters(std::string_view text);
Result<std::vector<CpuPagingRegisters>> QueryCpuPagingRegisters(QmpClient& qmp);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_GUEST_INFO_H_
