// Reading the hypervisor's HVM context blob (the body of a libxc HVM_CONTEXT record).
//
// The blob is a chain of descriptors {u16 typecode, u16 instance, u32 length} each followed by `length` bytes,
// starting with a HEADER (typecode 1) and ending with END (typecode 0, length 0); xen/include/public/hvm/save.h.
// We only need the per-vCPU control registers (to walk guest page tables for virtual-address locality), so
// everything else stays opaque. Layout offsets are pinned against libxen-dev in tests/xen_layout_pin_test.cc.
#ifndef HALITE_XEN_XEN_HVM_CONTEXT_H_
#define HALITE_XEN_XEN_HVM_CONTEXT_H_

#include <cstdint>
#include <span>
#include <vector>

#include "halite/status.h"

namespace halite::xen {

struct HvmVcpuRegisters {
  uint16_t vcpu = 0;  // the descriptor's instance
  uint64_t rip = 0, cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
};

struct HvmContextSummary {
  uint32_t version = 0;      // hvm_save_header.version
  uint64_t changeset = 0;
  uint32_t cpuid = 0;        // CPUID[1].eax of the saving host
  uint32_t gtsc_khz = 0;
  uint32_t descriptors = 0;  // including HEADER and END
  std::vector<HvmVcpuRegisters> vcpus;
};

// Walks the descriptor chain. Errors: kCorrupt naming the descriptor and its offset in the blob.
Result<HvmContextSummary> ParseHvmContext(std::span<const uint8_t> blob);

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_HVM_CONTEXT_H_
