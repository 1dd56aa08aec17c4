// Constants of QEMU's migration wire format (QEMU 7.2, x86-64 targets).
//
// Every value here was checked against a stock Debian bookworm QEMU 7.2 (see shared/notes/qemu-migration.md,
// "Stream framing", "RAM section", "Return path"); QEMU's migration/savevm.c and ram.c are the reference.
// All integers on the wire are big-endian.
#ifndef HALITE_QEMU_QEMU_STREAM_FORMAT_H_
#define HALITE_QEMU_QEMU_STREAM_FORMAT_H_

#include <cstdint>

namespace halite::qemu {

// Stream header: magic "QEVM" then be32 version.
inline constexpr uint32_t kStreamMagic = 0x5145564d;
inline constexpr uint32_t kStreamVersion = 3;

// Top-level record tags (one byte).
inline constexpr uint8_t kTagEof = 0x00;
inline constexpr uint8_t kTagSectionStart = 0x01;
inline constexpr uint8_t kTagSectionPart = 0x02;
inline constexpr uint8_t kTagSectionEnd = 0x03;
inline constexpr uint8_t kTagSectionFull = 0x04;
inline constexpr uint8_t kTagSubsection = 0x05;  // only inside vmstate bodies (and the configuration)
inline constexpr uint8_t kTagVmdesc = 0x06;
inline constexpr uint8_t kTagConfiguration = 0x07;
inline constexpr uint8_t kTagCommand = 0x08;
inline constexpr uint8_t kTagSectionFooter = 0x7e;

// COMMAND ids (be16), followed by be16 payload length and the payload.
enum class Command : uint16_t {
  kOpenReturnPath = 1,
  kPing = 2,
  kPostcopyAdvise = 3,
  kPostcopyListen = 4,
  kPostcopyRun = 5,
  kPostcopyRamDiscard = 6,
  kPackaged = 7,
  kEnableColo = 8,
  kPostcopyResume = 9,
  kRecvBitmap = 10,
};
const char* CommandName(uint16_t command);

// The destination refuses a PACKAGED payload larger than this (savevm.c MAX_VM_CMD_PACKAGED_SIZE).
inline constexpr uint32_t kMaxPackagedSize = 1u << 24;
// POSTCOPY_RAM_DISCARD payload version byte.
inline constexpr uint8_t kDiscardVersion = 0;

// The RAM section: name "ram", instance 0, version 4.
inline constexpr const char* kRamSectionName = "ram";
inline constexpr uint32_t kRamSectionVersion = 4;

// RAM record flags, in the low bits of each record's be64 (the rest is the page offset or a byte count).
inline constexpr uint64_t kRamFlagFull = 0x01;  // obsolete, never written by 7.2
inline constexpr uint64_t kRamFlagZero = 0x02;
inline constexpr uint64_t kRamFlagMemSize = 0x04;
inline constexpr uint64_t kRamFlagPage = 0x08;
inline constexpr uint64_t kRamFlagEos = 0x10;
inline constexpr uint64_t kRamFlagContinue = 0x20;
inline constexpr uint64_t kRamFlagXbzrle = 0x40;
inline constexpr uint64_t kRamFlagHook = 0x80;
inline constexpr uint64_t kRamFlagCompressPage = 0x100;
inline constexpr uint64_t kRamFlagMultifdFlush = 0x200;  // later QEMUs; named so the rejection is clear

// x86 target page: record offsets are multiples of it, PAGE records carry exactly this many bytes.
inline constexpr uint64_t kTargetPageSize = 4096;
inline constexpr uint64_t kTargetPageMask = ~(kTargetPageSize - 1);

// Return path (destination -> source): be16 type, be16 length, payload.
enum class ReturnPathType : uint16_t {
  kInvalid = 0,
  kShut = 1,
  kPong = 2,
  kReqPagesId = 3,
  kReqPages = 4,
  kRecvBitmap = 5,
  kResumeAck = 6,
};
const char* ReturnPathTypeName(uint16_t type);
// After a RECV_BITMAP message the bitmap follows raw: be64 size, size bytes, be64 this marker.
inline constexpr uint64_t kRecvBitmapEnding = 0x0123456789abcdefULL;

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_STREAM_FORMAT_H_
