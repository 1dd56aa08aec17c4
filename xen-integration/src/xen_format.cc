#include "halite/xen/xen_format.h"

namespace halite::xen {

bool IsKnownPageType(uint8_t type) { return type <= 0xF && !(type >= 0x5 && type <= 0x8); }

bool PageTypeHasData(uint8_t type) {
  // NOTAB and L1-L4 tables, pinned or not, carry a page; BROKEN, XALLOC and XTAB do not.
  return IsKnownPageType(type) && (type & 0x7) <= 0x4;
}

const char* LibxcRecordName(uint32_t type) {
  switch (type) {
    case kLibxcEnd: return "END";
    case kLibxcPageData: return "PAGE_DATA";
    case kLibxcX86PvInfo: return "X86_PV_INFO";
    case kLibxcX86PvP2mFrames: return "X86_PV_P2M_FRAMES";
    case kLibxcX86PvVcpuBasic: return "X86_PV_VCPU_BASIC";
    case kLibxcX86PvVcpuExtended: return "X86_PV_VCPU_EXTENDED";
    case kLibxcX86PvVcpuXsave: return "X86_PV_VCPU_XSAVE";
    case kLibxcSharedInfo: return "SHARED_INFO";
    case kLibxcX86TscInfo: return "X86_TSC_INFO";
    case kLibxcHvmContext: return "HVM_CONTEXT";
    case kLibxcHvmParams: return "HVM_PARAMS";
    case kLibxcToolstack: return "TOOLSTACK";
    case kLibxcX86PvVcpuMsrs: return "X86_PV_VCPU_MSRS";
    case kLibxcVerify: return "VERIFY";
    case kLibxcCheckpoint: return "CHECKPOINT";
    case kLibxcCheckpointDirtyPfnList: return "CHECKPOINT_DIRTY_PFN_LIST";
    case kLibxcStaticDataEnd: return "STATIC_DATA_END";
    case kLibxcX86CpuidPolicy: return "X86_CPUID_POLICY";
    case kLibxcX86MsrPolicy: return "X86_MSR_POLICY";
    default: return (type & kRecordOptional) ? "UNKNOWN_OPTIONAL" : "UNKNOWN";
  }
}

const char* LibxlRecordName(uint32_t type) {
  switch (type) {
    case kLibxlEnd: return "END";
    case kLibxlLibxcContext: return "LIBXC_CONTEXT";
    case kLibxlEmulatorXenstoreData: return "EMULATOR_XENSTORE_DATA";
    case kLibxlEmulatorContext: return "EMULATOR_CONTEXT";
    case kLibxlCheckpointEnd: return "CHECKPOINT_END";
    case kLibxlCheckpointState: return "CHECKPOINT_STATE";
    default: return (type & kRecordOptional) ? "UNKNOWN_OPTIONAL" : "UNKNOWN";
  }
}

}  // namespace halite::xen
