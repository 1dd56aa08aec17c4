#include "halite/xen/xen_stream_writer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "halite/bytes.h"

namespace halite::xen {

Status StreamWriter::Put(const void* p, size_t n) {
  HLT_RETURN_IF_ERROR(sink_.Write(p, n));
  written_ += n;
  return Status::Ok();
}

Status StreamWriter::PutRecordHeader(uint32_t type, uint64_t length) {
  if (length > kRestoreRecordLengthMax) {
    return Status::InvalidArgument("record type " + std::to_string(type) + ": body of " + std::to_string(length) +
                                   " bytes exceeds the restorer's 128 MiB limit");
  }
  uint8_t hdr[kRecordHeaderSize];
  StoreLe32(hdr, type);
  StoreLe32(hdr + 4, static_cast<uint32_t>(length));
  return Put(hdr, sizeof hdr);
}

Status StreamWriter::PutPadding(uint64_t length) {
  static constexpr uint8_t kZeros[8] = {};
  return Put(kZeros, PaddingFor(length));
}

Status StreamWriter::WriteXlHeader(const XlHeader& h) {
  if (!h.has_config && (!h.config.empty() || !h.optional_tail.empty())) {
    return Status::InvalidArgument("xl header: config or optional tail given without has_config");
  }
  if (!(h.mandatory_flags & kXlMandatoryStreamV2) || (h.mandatory_flags & ~kXlMandatoryKnown)) {
    return Status::InvalidArgument("xl header: mandatory flags must hold STREAMv2 and nothing unknown");
  }
  uint64_t optional_len = h.has_config ? 4 + h.config.size() + h.optional_tail.size() : 0;
  if (optional_len > UINT32_MAX) return Status::InvalidArgument("xl header: config too large");
  uint8_t hdr[kXlHeaderSize];
  std::memcpy(hdr, kXlMagic, kXlMagicSize);
  StoreLe32(hdr + 32, kXlByteOrderValue);
  StoreLe32(hdr + 36, h.mandatory_flags);
  StoreLe32(hdr + 40, h.optional_flags);
  StoreLe32(hdr + 44, static_cast<uint32_t>(optional_len));
  HLT_RETURN_IF_ERROR(Put(hdr, sizeof hdr));
  if (!h.has_config) return Status::Ok();
  uint8_t len[4];
  StoreLe32(len, static_cast<uint32_t>(h.config.size()));
  HLT_RETURN_IF_ERROR(Put(len, 4));
  HLT_RETURN_IF_ERROR(Put(h.config.data(), h.config.size()));
  return Put(h.optional_tail.data(), h.optional_tail.size());
}

Status StreamWriter::WriteLibxlHeader(const LibxlHeader& h) {
  if (h.options & ~kLibxlOptLegacy) return Status::InvalidArgument("libxl header: only the legacy option may be set");
  uint8_t hdr[kLibxlHeaderSize];
  StoreBe64(hdr, kLibxlIdent);
  StoreBe32(hdr + 8, kLibxlVersion);
  StoreBe32(hdr + 12, h.options);
  return Put(hdr, sizeof hdr);
}

Status StreamWriter::WriteLibxlRecord(uint32_t type, std::span<const uint8_t> body) {
  HLT_RETURN_IF_ERROR(PutRecordHeader(type, body.size()));
  HLT_RETURN_IF_ERROR(Put(body.data(), body.size()));
  return PutPadding(body.size());
}

Status StreamWriter::WriteLibxcHeaders(const LibxcHeaders& h) {
  if (h.version < kLibxcVersionMin || h.version > kLibxcVersion || h.options != 0 ||
      h.domain_type != kDomainTypeX86Hvm || h.page_shift != kPageShift) {
    return Status::InvalidArgument("libxc headers: need version 2 or 3, little-endian, x86 HVM, page shift 12");
  }
  uint8_t hdr[kLibxcImageHeaderSize + kLibxcDomainHeaderSize] = {};
  StoreBe64(hdr, kLibxcMarker);
  StoreBe32(hdr + 8, kLibxcId);
  StoreBe32(hdr + 12, h.version);
  StoreBe16(hdr + 16, h.options);
  uint8_t* d = hdr + kLibxcImageHeaderSize;
  StoreLe32(d, h.domain_type);
  StoreLe16(d + 4, h.page_shift);
  StoreLe32(d + 8, h.xen_major);
  StoreLe32(d + 12, h.xen_minor);
  return Put(hdr, sizeof hdr);
}

Status StreamWriter::WriteLibxcRecord(uint32_t type, std::span<const uint8_t> body) {
  if (type == kLibxcPageData) return Status::InvalidArgument("PAGE_DATA goes through WritePageBatch");
  HLT_RETURN_IF_ERROR(PutRecordHeader(type, body.size()));
  HLT_RETURN_IF_ERROR(Put(body.data(), body.size()));
  return PutPadding(body.size());
}

Status StreamWriter::WritePageBatch(std::span<const PageEntry> entries) {
  if (entries.empty() || entries.size() > kSaverBatchPfnsMax) {
    return Status::InvalidArgument("PAGE_DATA batch of " + std::to_string(entries.size()) +
                                   " pfns (expected 1..1024)");
  }
  // Header and pfn table go out as one write; page data follows without copying.
  scratch_.assign(kPageDataHeaderSize + 8 * entries.size(), 0);
  StoreLe32(scratch_.data(), static_cast<uint32_t>(entries.size()));
  uint64_t with_data = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const PageEntry& e = entries[i];
    auto type = static_cast<uint8_t>(e.type);
    if (!IsKnownPageType(type) || e.pfn > kX86MaxPfn) {
      return Status::InvalidArgument("PAGE_DATA entry " + std::to_string(i) + ": bad type or pfn");
    }
    if (PageTypeHasData(type) != (e.data != nullptr)) {
      return Status::InvalidArgument("PAGE_DATA entry " + std::to_string(i) +
                                     ": data must be given exactly for types that carry it");
    }
    with_data += e.data != nullptr;
    StoreLe64(scratch_.data() + kPageDataHeaderSize + 8 * i, (uint64_t{type} << kPfnTypeShift) | e.pfn);
  }
  std::vector<uint64_t> pfns(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) pfns[i] = entries[i].pfn;
  std::sort(pfns.begin(), pfns.end());
  if (std::adjacent_find(pfns.begin(), pfns.end()) != pfns.end()) {
    return Status::InvalidArgument("PAGE_DATA batch names a pfn twice");
  }
  uint64_t length = scratch_.size() + with_data * kPageSize;
  HLT_RETURN_IF_ERROR(PutRecordHeader(kLibxcPageData, length));
  HLT_RETURN_IF_ERROR(Put(scratch_.data(), scratch_.size()));
  for (const PageEntry& e : entries) {
    if (e.data) HLT_RETURN_IF_ERROR(Put(e.data, kPageSize));
  }
  return Status::Ok();  // always a multiple of 8: no padding
}

std::vector<uint8_t> MakeTscInfoBody(uint32_t mode, uint32_t khz, uint64_t nsec, uint32_t incarnation) {
  std::vector<uint8_t> b;
  PutLe32(&b, mode);
  PutLe32(&b, khz);
  PutLe64(&b, nsec);
  PutLe32(&b, incarnation);
  PutLe32(&b, 0);
  return b;
}

std::vector<uint8_t> MakeHvmParamsBody(std::span<const std::pair<uint64_t, uint64_t>> params) {
  std::vector<uint8_t> b;
  PutLe32(&b, static_cast<uint32_t>(params.size()));
  PutLe32(&b, 0);
  for (const auto& [index, value] : params) {
    PutLe64(&b, index);
    PutLe64(&b, value);
  }
  return b;
}

std::vector<uint8_t> MakeEmulatorBody(uint32_t emulator_id, uint32_t index, std::span<const uint8_t> payload) {
  std::vector<uint8_t> b;
  PutLe32(&b, emulator_id);
  PutLe32(&b, index);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

}  // namespace halite::xen
