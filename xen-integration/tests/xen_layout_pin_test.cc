// Pins our constants to the structures in Xen's public headers (Debian libxen-dev), at compile time.
//
// Built only where <xen/hvm/save.h> is found (CMake defines HALITE_HAVE_XEN_PUBLIC_HEADERS); elsewhere this
// program says so and exits 77 so ctest reports it skipped. The libxc/libxl stream records themselves
// (xg_sr_stream_format.h, libxl_sr_stream_format.h) are private to Xen's tools and not shipped in libxen-dev:
// those layouts are checked by the golden vectors and Xen's verify-stream-v2 instead.
#include <cstddef>
#include <cstdio>

#include "halite/xen/xen_format.h"

#if defined(HALITE_HAVE_XEN_PUBLIC_HEADERS)
#include <cstdint>
#define __XEN_TOOLS__ 1  // domctl.h is for toolstacks only
#include <xen/xen.h>
#include <xen/domctl.h>
#include <xen/hvm/save.h>

namespace x = halite::xen;

// hvm_save_descriptor and hvm_save_header (xen/hvm/save.h, arch-x86/hvm/save.h)
static_assert(sizeof(struct hvm_save_descriptor) == x::kHvmDescriptorSize);
static_assert(offsetof(struct hvm_save_descriptor, typecode) == 0);
static_assert(offsetof(struct hvm_save_descriptor, instance) == 2);
static_assert(offsetof(struct hvm_save_descriptor, length) == 4);
static_assert(sizeof(struct hvm_save_header) == x::kHvmSaveHeaderSize);
static_assert(offsetof(struct hvm_save_header, magic) == 0);
static_assert(offsetof(struct hvm_save_header, version) == 4);
static_assert(offsetof(struct hvm_save_header, changeset) == 8);
static_assert(offsetof(struct hvm_save_header, cpuid) == 16);
static_assert(offsetof(struct hvm_save_header, gtsc_khz) == 20);
static_assert(HVM_FILE_MAGIC == x::kHvmFileMagic);
static_assert(HVM_FILE_VERSION == x::kHvmFileVersion);
static_assert(HVM_SAVE_CODE(END) == x::kHvmCodeEnd);
static_assert(HVM_SAVE_CODE(HEADER) == x::kHvmCodeHeader);
static_assert(HVM_SAVE_CODE(CPU) == x::kHvmCodeCpu);
// hvm_hw_cpu: the registers the locality walk reads
static_assert(sizeof(struct hvm_hw_cpu) == x::kHvmHwCpuSize);
static_assert(offsetof(struct hvm_hw_cpu, rip) == x::kHvmHwCpuRipOffset);
static_assert(offsetof(struct hvm_hw_cpu, cr0) == x::kHvmHwCpuCr0Offset);
static_assert(offsetof(struct hvm_hw_cpu, cr3) == x::kHvmHwCpuCr3Offset);
static_assert(offsetof(struct hvm_hw_cpu, cr4) == x::kHvmHwCpuCr4Offset);
static_assert(offsetof(struct hvm_hw_cpu, msr_efer) == x::kHvmHwCpuEferOffset);
// CPU policy record elements (arch-x86/xen.h)
static_assert(sizeof(xen_cpuid_leaf_t) == x::kCpuidLeafSize);
static_assert(sizeof(xen_msr_entry_t) == x::kMsrEntrySize);
static_assert(offsetof(xen_msr_entry_t, val) == 8);
// PAGE_DATA types are XEN_DOMCTL_PFINFO_* (domctl.h) moved from bit 28 to bit 60
static_assert(XEN_DOMCTL_PFINFO_LTAB_SHIFT + 32 == x::kPfnTypeShift);
static_assert((XEN_DOMCTL_PFINFO_NOTAB >> 28) == static_cast<unsigned>(x::PageType::kNormal));
static_assert((XEN_DOMCTL_PFINFO_L1TAB >> 28) == static_cast<unsigned>(x::PageType::kL1));
static_assert((XEN_DOMCTL_PFINFO_L4TAB >> 28) == static_cast<unsigned>(x::PageType::kL4));
static_assert(((XEN_DOMCTL_PFINFO_L1TAB | XEN_DOMCTL_PFINFO_LPINTAB) >> 28) ==
              static_cast<unsigned>(x::PageType::kL1Pinned));
static_assert((XEN_DOMCTL_PFINFO_BROKEN >> 28) == static_cast<unsigned>(x::PageType::kBroken));
static_assert((XEN_DOMCTL_PFINFO_XALLOC >> 28) == static_cast<unsigned>(x::PageType::kXalloc));
static_assert((XEN_DOMCTL_PFINFO_XTAB >> 28) == static_cast<unsigned>(x::PageType::kXtab));

int main() {
  std::printf("xen_layout_pin: hvm_save_header, hvm_save_descriptor, hvm_hw_cpu (rip/cr0/cr3/cr4/efer), "
              "xen_cpuid_leaf_t, xen_msr_entry_t and XEN_DOMCTL_PFINFO_* match Xen's public headers "
              "(checked at compile time)\n");
  return 0;
}
#else
int main() {
  std::fprintf(stderr,
               "=====================================================================\n"
               "SKIPPED: xen_layout_pin: Xen's public headers (<xen/hvm/save.h>, Debian package libxen-dev) were\n"
               "not found when this was configured, so our layouts are not pinned against them on this machine.\n"
               "Install libxen-dev and re-run cmake.\n"
               "=====================================================================\n");
  return 77;
}
#endif
