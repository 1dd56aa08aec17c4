#include "halite/xen/xen_hvm_context.h"

#include <string>

#include "halite/xen/xen_format.h"
#include "halite/bytes.h"

namespace halite::xen {

Result<HvmContextSummary> ParseHvmContext(std::span<const uint8_t> blob) {
  HvmContextSummary out;
  size_t pos = 0;
  auto fail = [&](uint32_t index, const std::string& what) {
    return Status::Corrupt("HVM context descriptor " + std::to_string(index) + " at offset " + std::to_string(pos) +
                           ": " + what);
  };
  for (uint32_t index = 0;; ++index) {
    if (blob.size() - pos < kHvmDescriptorSize) return fail(index, "truncated (no END descriptor)");
    uint16_t code = LoadLe16(blob.data() + pos);
    uint16_t instance = LoadLe16(blob.data() + pos + 2);
    uint32_t length = LoadLe32(blob.data() + pos + 4);
    if (blob.size() - pos - kHvmDescriptorSize < length) return fail(index, "length runs past the blob");
    const uint8_t* body = blob.data() + pos + kHvmDescriptorSize;
    if (index == 0) {
      if (code != kHvmCodeHeader || length != kHvmSaveHeaderSize) return fail(index, "not a 24-byte HEADER");
      if (LoadLe32(body) != kHvmFileMagic) return fail(index, "bad magic (expected 0x54381286)");
      out.version = LoadLe32(body + 4);
      if (out.version != kHvmFileVersion) return fail(index, "version " + std::to_string(out.version));
      out.changeset = LoadLe64(body + 8);
      out.cpuid = LoadLe32(body + 16);
      out.gtsc_khz = LoadLe32(body + 20);
    } else if (code == kHvmCodeEnd) {
      if (length != 0) return fail(index, "END with a body");
      pos += kHvmDescriptorSize;
      out.descriptors = index + 1;
      if (pos != blob.size()) return fail(index + 1, "bytes after END");
      return out;
    } else if (code == kHvmCodeCpu) {
      // Older Xen wrote a shorter CPU record (no trailing flags); the registers we read are in both.
      if (length < kHvmHwCpuEferOffset + 8) return fail(index, "CPU record too short");
      HvmVcpuRegisters r;
      r.vcpu = instance;
      r.rip = LoadLe64(body + kHvmHwCpuRipOffset);
      r.cr0 = LoadLe64(body + kHvmHwCpuCr0Offset);
      r.cr3 = LoadLe64(body + kHvmHwCpuCr3Offset);
      r.cr4 = LoadLe64(body + kHvmHwCpuCr4Offset);
      r.efer = LoadLe64(body + kHvmHwCpuEferOffset);
      out.vcpus.push_back(r);
    } else if (code == kHvmCodeHeader) {
      return fail(index, "second HEADER");
    }
    pos += kHvmDescriptorSize + length;
  }
}

}  // namespace halite::xen
