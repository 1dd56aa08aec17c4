// Constants of the three layers of an `xl save` image, each citing where Xen defines it.
//
// Sources (Xen 4.17; unchanged through 4.21):
//   [xl]    tools/xl/xl.h (struct save_file_header), tools/xl/xl_saverestore.c, tools/xl/xl_vmcontrol.c
//   [libxl] docs/specs/libxl-migration-stream.pandoc (revision 2)
//   [libxc] docs/specs/libxc-migration-stream.pandoc (revision 3)
//   [xc-rs] tools/libs/guest/xg_sr_restore*.c, xg_sr_common*.c: what the restorer actually enforces
//   [hvm]   xen/include/public/arch-x86/hvm/save.h (Debian libxen-dev: /usr/include/xen/arch-x86/hvm/save.h)
// Byte order: the xl header and libxl/libxc records are little-endian (x86 hosts; big-endian streams are
// rejected, as Xen itself does); the libxl stream header and libxc image header are big-endian.
#ifndef HALITE_XEN_XEN_FORMAT_H_
#define HALITE_XEN_XEN_FORMAT_H_

#include <cstddef>
#include <cstdint>

namespace halite::xen {

// ---- xl file wrapper [xl] ----
// 32 bytes on disk; the array has one more for the literal's terminating NUL, which is not part of the magic.
inline constexpr char kXlMagic[33] = "Xen saved domain, xl format\n \0 \r";
inline constexpr size_t kXlMagicSize = 32;
inline constexpr size_t kXlHeaderSize = 48;                  // magic + 4 x u32
inline constexpr uint32_t kXlByteOrderValue = 0x01020304;     // SAVEFILE_BYTEORDER_VALUE, in host order
inline constexpr uint32_t kXlMandatoryJson = 1u << 0;         // XL_MANDATORY_FLAG_JSON: config is JSON
inline constexpr uint32_t kXlMandatoryStreamV2 = 1u << 1;     // XL_MANDATORY_FLAG_STREAMv2: libxl stream follows
inline constexpr uint32_t kXlMandatoryKnown = kXlMandatoryJson | kXlMandatoryStreamV2;

// ---- libxl stream [libxl] "Header", "Record Overview" ----
inline constexpr uint64_t kLibxlIdent = 0x4c6962786c466d74;  // "LibxlFmt"
inline constexpr uint32_t kLibxlVersion = 2;
inline constexpr size_t kLibxlHeaderSize = 16;
inline constexpr uint32_t kLibxlOptBigEndian = 1u << 0;
inline constexpr uint32_t kLibxlOptLegacy = 1u << 1;         // produced by the legacy conversion tool
inline constexpr uint32_t kLibxlOptKnown = kLibxlOptBigEndian | kLibxlOptLegacy;

enum LibxlRecordType : uint32_t {
  kLibxlEnd = 0,
  kLibxlLibxcContext = 1,         // empty body; the libxc stream follows inline
  kLibxlEmulatorXenstoreData = 2,  // u32 emulator_id, u32 index, NUL-terminated key/value pairs
  kLibxlEmulatorContext = 3,       // u32 emulator_id, u32 index, emulator (QEMU) device state
  kLibxlCheckpointEnd = 4,         // Remus/COLO only
  kLibxlCheckpointState = 5,       // COLO only
};
inline constexpr size_t kLibxlEmulatorHeaderSize = 8;
inline constexpr uint32_t kEmulatorQemuTraditional = 1;
inline constexpr uint32_t kEmulatorQemuUpstream = 2;

// ---- libxc stream [libxc] "Image Header", "Domain Header", "Records" ----
inline constexpr uint64_t kLibxcMarker = 0xffffffffffffffff;
inline constexpr uint32_t kLibxcId = 0x58454E46;  // "XENF"
inline constexpr uint32_t kLibxcVersionMin = 2;   // [xc-rs] read_headers accepts 2..3
inline constexpr uint32_t kLibxcVersion = 3;      // what Xen >= 4.14 writes
inline constexpr size_t kLibxcImageHeaderSize = 24;
inline constexpr size_t kLibxcDomainHeaderSize = 16;
inline constexpr uint16_t kLibxcOptBigEndian = 1u << 0;
inline constexpr uint32_t kDomainTypeX86Pv = 1;
inline constexpr uint32_t kDomainTypeX86Hvm = 2;
inline constexpr uint16_t kPageShift = 12;
inline constexpr size_t kPageSize = 4096;

enum LibxcRecordType : uint32_t {
  kLibxcEnd = 0x00,
  kLibxcPageData = 0x01,
  kLibxcX86PvInfo = 0x02,
  kLibxcX86PvP2mFrames = 0x03,
  kLibxcX86PvVcpuBasic = 0x04,
  kLibxcX86PvVcpuExtended = 0x05,
  kLibxcX86PvVcpuXsave = 0x06,
  kLibxcSharedInfo = 0x07,
  kLibxcX86TscInfo = 0x08,
  kLibxcHvmContext = 0x09,
  kLibxcHvmParams = 0x0A,
  kLibxcToolstack = 0x0B,  // deprecated; the 4.17 HVM restorer refuses it
  kLibxcX86PvVcpuMsrs = 0x0C,
  kLibxcVerify = 0x0D,
  kLibxcCheckpoint = 0x0E,
  kLibxcCheckpointDirtyPfnList = 0x0F,
  kLibxcStaticDataEnd = 0x10,
  kLibxcX86CpuidPolicy = 0x11,
  kLibxcX86MsrPolicy = 0x12,
};

// Both layers: records are u32 type, u32 body_length, body, zero padding to a multiple of 8 bytes.
inline constexpr size_t kRecordHeaderSize = 8;
// Bytes of zero padding after a record body of `length` bytes so the record ends on an 8-byte boundary.
inline constexpr uint32_t PaddingFor(uint64_t length) { return static_cast<uint32_t>((8 - (length & 7)) & 7); }
inline constexpr uint32_t kRecordOptional = 1u << 31;  // unknown optional records may be skipped
// [xc-rs] REC_LENGTH_MAX: the restorer refuses any record body longer than 128 MiB.
inline constexpr uint32_t kRestoreRecordLengthMax = 128u << 20;
// [xc-rs] the saver's MAX_BATCH_SIZE: no Xen saver writes more than 1024 pfns in one PAGE_DATA record.
inline constexpr uint32_t kSaverBatchPfnsMax = 1024;
// x86 physical addresses are at most 52 bits, so no x86 guest frame number reaches 2^40.
inline constexpr uint64_t kX86MaxPfn = (uint64_t{1} << 40) - 1;

// PAGE_DATA [libxc] "PAGE_DATA": u32 count (> 0), u32 reserved, count x u64 entry, then page data.
inline constexpr size_t kPageDataHeaderSize = 8;
inline constexpr uint64_t kPfnMask = (uint64_t{1} << 52) - 1;        // bits 0-51
inline constexpr uint64_t kPfnReservedMask = uint64_t{0xff} << 52;  // bits 52-59, must be zero
inline constexpr unsigned kPfnTypeShift = 60;                        // bits 60-63: XEN_DOMCTL_PFINFO_* >> 28

// XEN_DOMCTL_PFINFO_* (xen/include/public/domctl.h) shifted down to 4 bits.
enum class PageType : uint8_t {
  kNormal = 0x0,  // NOTAB
  kL1 = 0x1,
  kL2 = 0x2,
  kL3 = 0x3,
  kL4 = 0x4,
  // 0x5-0x8 reserved: a restorer must reject them
  kL1Pinned = 0x9,
  kL2Pinned = 0xA,
  kL3Pinned = 0xB,
  kL4Pinned = 0xC,
  kBroken = 0xD,
  kXalloc = 0xE,  // allocate only, no data in the stream
  kXtab = 0xF,    // invalid pfn (hole), no data in the stream
};
// False for the reserved values 5..8.
bool IsKnownPageType(uint8_t type);
// True for types followed by 4096 bytes of data in a PAGE_DATA record (normal and page-table pages).
bool PageTypeHasData(uint8_t type);

// X86_TSC_INFO: u32 mode, u32 khz, u64 nsec, u32 incarnation, u32 reserved.
inline constexpr size_t kTscInfoSize = 24;
// HVM_PARAMS: u32 count, u32 reserved, count x {u64 index, u64 value}.
inline constexpr size_t kHvmParamsHeaderSize = 8;
inline constexpr size_t kHvmParamsEntrySize = 16;
// X86_CPUID_POLICY is an array of xen_cpuid_leaf_t (6 x u32), X86_MSR_POLICY of xen_msr_entry_t
// (u32 idx, u32 flags, u64 val); xen/include/public/arch-x86/xen.h.
inline constexpr size_t kCpuidLeafSize = 24;
inline constexpr size_t kMsrEntrySize = 16;

// ---- HVM context blob [hvm]: descriptors {u16 typecode, u16 instance, u32 length} + payload ----
inline constexpr size_t kHvmDescriptorSize = 8;
inline constexpr uint16_t kHvmCodeEnd = 0;
inline constexpr uint16_t kHvmCodeHeader = 1;
inline constexpr uint16_t kHvmCodeCpu = 2;
inline constexpr uint32_t kHvmFileMagic = 0x54381286;
inline constexpr uint32_t kHvmFileVersion = 1;
inline constexpr size_t kHvmSaveHeaderSize = 24;  // u32 magic, u32 version, u64 changeset, u32 cpuid, u32 gtsc_khz
inline constexpr size_t kHvmHwCpuSize = 1032;     // struct hvm_hw_cpu
inline constexpr size_t kHvmHwCpuRipOffset = 640;
inline constexpr size_t kHvmHwCpuCr0Offset = 656;
inline constexpr size_t kHvmHwCpuCr3Offset = 672;
inline constexpr size_t kHvmHwCpuCr4Offset = 680;
inline constexpr size_t kHvmHwCpuEferOffset = 992;

// Record type names as the specs spell them ("PAGE_DATA"); "UNKNOWN" for anything else.
const char* LibxcRecordName(uint32_t type);
const char* LibxlRecordName(uint32_t type);

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_FORMAT_H_
