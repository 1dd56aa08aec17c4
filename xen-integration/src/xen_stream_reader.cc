// The stream reader: one pass, forward only, every rule checked before the visitor sees the data.
#include "halite/xen/xen_stream_reader.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "halite/bytes.h"

namespace halite::xen {
namespace {


enum class Layer { kLibxl, kLibxc };

std::string TypeName(Layer layer, uint32_t type) {
  const char* name = layer == Layer::kLibxc ? LibxcRecordName(type) : LibxlRecordName(type);
  if (std::strncmp(name, "UNKNOWN", 7) == 0) return std::string(name) + " " + fmt::format("{:#x}", type);
  return name;
}

// A record as framed on the wire; the body borrows the reader's buffer.
struct RawRecord {
  uint32_t index = 0;
  uint64_t offset = 0;
  uint32_t type = 0;
  std::span<const uint8_t> body;
};

class Reader {
 public:
  Reader(SequentialSource& source, StreamVisitor& visitor, const ReadOptions& options)
      : source_(source), visitor_(visitor), opt_(options) {}

  Status Run() {
    switch (opt_.format) {
      case StreamFormat::kXl: HLT_RETURN_IF_ERROR(ReadXl()); break;
      case StreamFormat::kLibxl: HLT_RETURN_IF_ERROR(ReadLibxl()); break;
      case StreamFormat::kLibxc: HLT_RETURN_IF_ERROR(ReadLibxc()); break;
    }
    HLT_RETURN_IF_ERROR(CheckEndOfInput());
    return visitor_.OnStreamEnd();
  }

 private:
  Status Err(StatusCode code, const std::string& where, const std::string& what) const {
    return Status(code, opt_.source_name + ": " + where + ": " + what);
  }
  Status Corrupt(const std::string& where, const std::string& what) const {
    return Err(StatusCode::kCorrupt, where, what);
  }
  Status Unsupported(const std::string& where, const std::string& what) const {
    return Err(StatusCode::kUnsupported, where, what);
  }
  static std::string RecordWhere(Layer layer, uint32_t index, uint32_t type, uint64_t offset) {
    return std::string(layer == Layer::kLibxc ? "libxc" : "libxl") + " record " + std::to_string(index) + " (" +
           TypeName(layer, type) + ") at offset " + fmt::format("{:#x}", offset);
  }
  static std::string RecordWhere(Layer layer, const RawRecord& r) {
    return RecordWhere(layer, r.index, r.type, r.offset);
  }

  // Reads exactly n bytes; a short read is truncation, reported against `where`.
  Status ReadExact(void* buf, size_t n, const std::string& where, const char* what) {
    auto* p = static_cast<uint8_t*>(buf);
    size_t got = 0;
    while (got < n) {
      auto r = source_.ReadSome(p + got, n - got);
      if (!r) return r.error().WithContext(opt_.source_name + ": " + where + " at offset " + fmt::format("{:#x}", offset_ + got));
      if (*r == 0) {
        return Corrupt(where, "truncated: input ends at offset " + fmt::format("{:#x}", offset_ + got) + " after " +
                                  std::to_string(got) + " of " + std::to_string(n) + " bytes of the " + what);
      }
      got += *r;
    }
    offset_ += n;
    return Status::Ok();
  }

  // Reads n bytes into body_, growing it only as data actually arrives: a header that claims 128 MiB on a
  // short input must not cost 128 MiB (fuzzers, hostile pipes). body_ holds them until the next ReadBody.
  Status ReadBody(size_t n, const std::string& where, const char* what) {
    const uint64_t start = offset_;
    size_t have = 0;
    while (have < n) {
      size_t chunk = std::min(n - have, std::max<size_t>(have, 1u << 20));
      if (body_.size() < have + chunk) body_.resize(have + chunk);
      auto r = source_.ReadSome(body_.data() + have, chunk);
      if (!r) return r.error().WithContext(opt_.source_name + ": " + where + " at offset " + fmt::format("{:#x}", start + have));
      if (*r == 0) {
        return Corrupt(where, "truncated: input ends at offset " + fmt::format("{:#x}", start + have) + " after " +
                                  std::to_string(have) + " of " + std::to_string(n) + " bytes of the " + what);
      }
      have += *r;
    }
    offset_ += n;
    return Status::Ok();
  }

  Status CheckEndOfInput() {
    if (!opt_.require_end_of_input) return Status::Ok();
    uint8_t byte;
    auto r = source_.ReadSome(&byte, 1);
    if (!r) return r.error().WithContext(opt_.source_name);
    if (*r != 0) {
      return Corrupt("end of stream at offset " + fmt::format("{:#x}", offset_),
                     "unexpected data after the END record (a save image ends there)");
    }
    return Status::Ok();
  }

  // Reads header, body and padding of the next record of `layer`; enforces the size cap and zero padding.
  Status ReadRecord(Layer layer, uint32_t index, RawRecord* rec) {
    rec->index = index;
    rec->offset = offset_;
    uint8_t hdr[kRecordHeaderSize];
    std::string header_where = std::string(layer == Layer::kLibxc ? "libxc" : "libxl") + " record " +
                               std::to_string(index) + " header at offset " + fmt::format("{:#x}", offset_);
    HLT_RETURN_IF_ERROR(ReadExact(hdr, sizeof hdr, header_where, "record header (an END record was expected "
                                                                 "before the input ends)"));
    rec->type = LoadLe32(hdr);
    uint32_t length = LoadLe32(hdr + 4);
    if (length > opt_.max_record_length) {
      return Corrupt(RecordWhere(layer, *rec), "body length " + fmt::format("{:#x}", length) + " exceeds the limit " +
                                                   fmt::format("{:#x}", opt_.max_record_length) + " (Xen's restorer refuses it)");
    }
    uint32_t padded = length + PaddingFor(length);
    HLT_RETURN_IF_ERROR(ReadBody(padded, RecordWhere(layer, *rec), "record body and padding"));
    for (uint32_t i = length; i < padded; ++i) {
      if (body_[i] != 0) {
        return Corrupt(RecordWhere(layer, *rec), "padding byte at offset " +
                                                     fmt::format("{:#x}", rec->offset + kRecordHeaderSize + i) + " is " +
                                                     fmt::format("{:#x}", body_[i]) + " (padding must be zero)");
      }
    }
    rec->body = std::span<const uint8_t>(body_.data(), length);
    return Status::Ok();
  }

  Status ExpectLength(Layer layer, const RawRecord& r, size_t expected) const {
    if (r.body.size() == expected) return Status::Ok();
    return Corrupt(RecordWhere(layer, r), "body length " + std::to_string(r.body.size()) + " (expected " +
                                              std::to_string(expected) + ")");
  }

  // ---- xl wrapper ----
  Status ReadXl() {
    const std::string where = "xl header at offset 0x0";
    uint8_t hdr[kXlHeaderSize];
    HLT_RETURN_IF_ERROR(ReadExact(hdr, sizeof hdr, where, "xl header"));
    if (std::memcmp(hdr, kXlMagic, kXlMagicSize) != 0) {
      return Corrupt(where, "bad magic (expected \"Xen saved domain, xl format\\n \\0 \\r\")");
    }
    uint32_t byteorder = LoadLe32(hdr + 32);
    if (byteorder == 0x04030201) {
      return Unsupported(where, "byte order marker 0x04030201: written on a big-endian host (not supported)");
    }
    if (byteorder != kXlByteOrderValue) {
      return Corrupt(where, "byte order marker " + fmt::format("{:#x}", byteorder) + " (expected 0x1020304)");
    }
    XlHeader xl;
    xl.mandatory_flags = LoadLe32(hdr + 36);
    xl.optional_flags = LoadLe32(hdr + 40);
    uint32_t optional_len = LoadLe32(hdr + 44);
    if (uint32_t unknown = xl.mandatory_flags & ~kXlMandatoryKnown) {
      return Unsupported(where, "unknown mandatory flags " + fmt::format("{:#x}", unknown) + " (known: 0x3; a newer xl wrote this)");
    }
    if (!(xl.mandatory_flags & kXlMandatoryStreamV2)) {
      return Unsupported(where, "mandatory flags " + fmt::format("{:#x}", xl.mandatory_flags) +
                                    " lack STREAMv2 (bit 1): a legacy pre-4.6 image; convert it with Xen's "
                                    "convert-legacy-stream first");
    }
    if (optional_len > opt_.max_xl_optional_data) {
      return Corrupt(where, "optional data length " + std::to_string(optional_len) + " exceeds the limit " +
                                std::to_string(opt_.max_xl_optional_data));
    }
    HLT_RETURN_IF_ERROR(ReadBody(optional_len, where, "xl optional data"));
    std::span<const uint8_t> optional(body_.data(), optional_len);
    if (optional_len != 0) {
      if (optional_len < 4) {
        return Corrupt(where, "optional data of " + std::to_string(optional_len) +
                                  " bytes (expected none or a 4-byte config length first)");
      }
      uint32_t config_len = LoadLe32(optional.data());
      if (config_len > optional_len - 4) {
        return Corrupt(where, "config length " + std::to_string(config_len) + " exceeds the " +
                                  std::to_string(optional_len - 4) + " bytes of optional data left");
      }
      xl.has_config = true;
      xl.config = std::span<const uint8_t>(optional.data() + 4, config_len);
      xl.optional_tail = std::span<const uint8_t>(optional.data() + 4 + config_len, optional_len - 4 - config_len);
    }
    HLT_RETURN_IF_ERROR(visitor_.OnXlHeader(xl));
    return ReadLibxl();
  }

  // ---- libxl stream ----
  Status ReadLibxl() {
    const std::string where = "libxl header at offset " + fmt::format("{:#x}", offset_);
    uint8_t hdr[kLibxlHeaderSize];
    HLT_RETURN_IF_ERROR(ReadExact(hdr, sizeof hdr, where, "libxl header"));
    if (uint64_t ident = LoadBe64(hdr); ident != kLibxlIdent) {
      return Corrupt(where, "ident " + fmt::format("{:#x}", ident) + " (expected 0x4c6962786c466d74, \"LibxlFmt\")");
    }
    if (uint32_t version = LoadBe32(hdr + 8); version != kLibxlVersion) {
      return Unsupported(where, "version " + std::to_string(version) + " (expected 2)");
    }
    LibxlHeader header;
    header.options = LoadBe32(hdr + 12);
    if (header.options & kLibxlOptBigEndian) {
      return Unsupported(where, "big-endian stream (options bit 0 set): not supported, as by libxl itself");
    }
    if (uint32_t reserved = header.options & ~kLibxlOptKnown) {
      return Corrupt(where, "reserved option bits " + fmt::format("{:#x}", reserved) + " set (must be zero)");
    }
    HLT_RETURN_IF_ERROR(visitor_.OnLibxlHeader(header));

    bool seen_libxc = false;
    for (uint32_t index = 0;; ++index) {
      RawRecord r;
      HLT_RETURN_IF_ERROR(ReadRecord(Layer::kLibxl, index, &r));
      const std::string rwhere = RecordWhere(Layer::kLibxl, r);
      switch (r.type) {
        case kLibxlEnd:
          HLT_RETURN_IF_ERROR(ExpectLength(Layer::kLibxl, r, 0));
          if (!seen_libxc) return Corrupt(rwhere, "END before any LIBXC_CONTEXT: the stream holds no domain");
          return visitor_.OnLibxlRecord(ToLibxl(r));
        case kLibxlLibxcContext:
          HLT_RETURN_IF_ERROR(ExpectLength(Layer::kLibxl, r, 0));
          if (seen_libxc) return Corrupt(rwhere, "second LIBXC_CONTEXT (a save image has exactly one)");
          seen_libxc = true;
          HLT_RETURN_IF_ERROR(visitor_.OnLibxlRecord(ToLibxl(r)));
          HLT_RETURN_IF_ERROR(ReadLibxc());
          break;
        case kLibxlEmulatorXenstoreData:
        case kLibxlEmulatorContext:
          HLT_RETURN_IF_ERROR(CheckEmulatorRecord(r));
          HLT_RETURN_IF_ERROR(visitor_.OnLibxlRecord(ToLibxl(r)));
          break;
        case kLibxlCheckpointEnd:
        case kLibxlCheckpointState:
          return Unsupported(rwhere, "checkpointed (Remus/COLO) streams are not supported");
        default:
          if (!(r.type & kRecordOptional)) {
            return Unsupported(rwhere, "unknown mandatory record type (bit 31 clear; a newer Xen wrote this)");
          }
          // Optional records may be skipped by a restorer; we keep them so export reproduces them.
          HLT_RETURN_IF_ERROR(visitor_.OnLibxlRecord(ToLibxl(r)));
          break;
      }
    }
  }

  static LibxlRecord ToLibxl(const RawRecord& r) { return LibxlRecord{r.index, r.offset, r.type, r.body}; }

  Status CheckEmulatorRecord(const RawRecord& r) const {
    const std::string where = RecordWhere(Layer::kLibxl, r);
    if (r.body.size() < kLibxlEmulatorHeaderSize) {
      return Corrupt(where, "body length " + std::to_string(r.body.size()) +
                                " (expected at least 8: emulator id and index)");
    }
    uint32_t emulator = LoadLe32(r.body.data());
    if (emulator > kEmulatorQemuUpstream) {
      return Corrupt(where, "emulator id " + fmt::format("{:#x}", emulator) + " (expected 0 unknown, 1 qemu-trad or 2 qemu)");
    }
    if (r.type == kLibxlEmulatorXenstoreData && r.body.size() > kLibxlEmulatorHeaderSize) {
      // Packed NUL-terminated key and value strings: the data ends in NUL and holds an even number of them.
      auto data = r.body.subspan(kLibxlEmulatorHeaderSize);
      if (data.back() != 0) return Corrupt(where, "xenstore data does not end in a NUL");
      size_t strings = static_cast<size_t>(std::count(data.begin(), data.end(), uint8_t{0}));
      if (strings % 2 != 0) {
        return Corrupt(where, "xenstore data holds " + std::to_string(strings) +
                                  " strings (expected key/value pairs)");
      }
    }
    return Status::Ok();
  }

  // ---- libxc stream ----
  Status ReadLibxc() {
    LibxcHeaders h;
    h.offset = offset_;
    std::string where = "libxc image header at offset " + fmt::format("{:#x}", offset_);
    uint8_t ihdr[kLibxcImageHeaderSize];
    HLT_RETURN_IF_ERROR(ReadExact(ihdr, sizeof ihdr, where, "libxc image header"));
    if (uint64_t marker = LoadBe64(ihdr); marker != kLibxcMarker) {
      return Corrupt(where, "marker " + fmt::format("{:#x}", marker) + " (expected all ones; zero bits mean a legacy image)");
    }
    if (uint32_t id = LoadBe32(ihdr + 8); id != kLibxcId) {
      return Corrupt(where, "id " + fmt::format("{:#x}", id) + " (expected 0x58454e46, \"XENF\")");
    }
    h.version = LoadBe32(ihdr + 12);
    if (h.version < kLibxcVersionMin || h.version > kLibxcVersion) {
      return Err(h.version > kLibxcVersion ? StatusCode::kUnsupported : StatusCode::kCorrupt, where,
                 "version " + std::to_string(h.version) + " (expected 2 or 3)");
    }
    h.options = LoadBe16(ihdr + 16);
    if (h.options & kLibxcOptBigEndian) {
      return Unsupported(where, "big-endian stream (options bit 0 set): not supported, as by Xen's restorer");
    }
    if (h.options != 0) return Corrupt(where, "reserved option bits " + fmt::format("{:#x}", h.options) + " set (must be zero)");
    if (LoadBe16(ihdr + 18) != 0 || LoadBe32(ihdr + 20) != 0) {
      return Corrupt(where, "reserved bytes 18-23 not zero");
    }
    where = "libxc domain header at offset " + fmt::format("{:#x}", offset_);
    uint8_t dhdr[kLibxcDomainHeaderSize];
    HLT_RETURN_IF_ERROR(ReadExact(dhdr, sizeof dhdr, where, "libxc domain header"));
    h.domain_type = LoadLe32(dhdr);
    h.page_shift = LoadLe16(dhdr + 4);
    h.xen_major = LoadLe32(dhdr + 8);
    h.xen_minor = LoadLe32(dhdr + 12);
    if (h.domain_type == kDomainTypeX86Pv) {
      return Unsupported(where, "x86 PV guest (type 1): only x86 HVM streams are supported");
    }
    if (h.domain_type != kDomainTypeX86Hvm) {
      return Corrupt(where, "domain type " + fmt::format("{:#x}", h.domain_type) + " (expected 2, x86 HVM)");
    }
    if (h.page_shift != kPageShift) {
      return Corrupt(where, "page shift " + std::to_string(h.page_shift) + " (expected 12)");
    }
    if (LoadLe16(dhdr + 6) != 0) return Corrupt(where, "reserved bytes 6-7 not zero");
    HLT_RETURN_IF_ERROR(visitor_.OnLibxcHeaders(h));

    bool seen_static_data_end = false;
    uint32_t batches = 0;
    for (uint32_t index = 0;; ++index) {
      RawRecord r;
      HLT_RETURN_IF_ERROR(ReadRecord(Layer::kLibxc, index, &r));
      const std::string rwhere = RecordWhere(Layer::kLibxc, r);
      switch (r.type) {
        case kLibxcEnd:
          HLT_RETURN_IF_ERROR(ExpectLength(Layer::kLibxc, r, 0));
          return Deliver(r, batches);
        case kLibxcPageData:
          if (!seen_static_data_end) {
            if (h.version >= 3) {
              return Corrupt(rwhere, "PAGE_DATA before STATIC_DATA_END (a v3 stream sends it first)");
            }
            seen_static_data_end = true;  // v2: behave as if it had been sent here
            HLT_RETURN_IF_ERROR(visitor_.OnStaticDataEndInferred(r.offset));
          }
          HLT_RETURN_IF_ERROR(HandlePageData(r, batches));
          ++batches;
          break;
        case kLibxcStaticDataEnd:
          HLT_RETURN_IF_ERROR(ExpectLength(Layer::kLibxc, r, 0));
          if (seen_static_data_end) {
            return Corrupt(rwhere, batches ? "STATIC_DATA_END after page data" : "second STATIC_DATA_END");
          }
          seen_static_data_end = true;
          HLT_RETURN_IF_ERROR(Deliver(r, batches));
          break;
        case kLibxcX86CpuidPolicy:
        case kLibxcX86MsrPolicy: {
          size_t unit = r.type == kLibxcX86CpuidPolicy ? kCpuidLeafSize : kMsrEntrySize;
          if (r.body.empty() || r.body.size() % unit != 0) {
            return Corrupt(rwhere, "body length " + std::to_string(r.body.size()) + " (expected a non-zero "
                                   "multiple of " + std::to_string(unit) + ")");
          }
          HLT_RETURN_IF_ERROR(Deliver(r, batches));
          break;
        }
        case kLibxcX86TscInfo:
          HLT_RETURN_IF_ERROR(ExpectLength(Layer::kLibxc, r, kTscInfoSize));
          if (LoadLe32(r.body.data() + 20) != 0) return Corrupt(rwhere, "reserved field not zero");
          HLT_RETURN_IF_ERROR(Deliver(r, batches));
          break;
        case kLibxcHvmContext:
          if (r.body.empty()) return Corrupt(rwhere, "empty HVM context (expected the hypervisor's blob)");
          HLT_RETURN_IF_ERROR(Deliver(r, batches));
          break;
        case kLibxcHvmParams:
          HLT_RETURN_IF_ERROR(CheckHvmParams(r));
          HLT_RETURN_IF_ERROR(Deliver(r, batches));
          break;
        case kLibxcVerify:
          HLT_RETURN_IF_ERROR(ExpectLength(Layer::kLibxc, r, 0));
          HLT_RETURN_IF_ERROR(Deliver(r, batches));
          break;
        case kLibxcX86PvInfo:
        case kLibxcX86PvP2mFrames:
        case kLibxcX86PvVcpuBasic:
        case kLibxcX86PvVcpuExtended:
        case kLibxcX86PvVcpuXsave:
        case kLibxcX86PvVcpuMsrs:
        case kLibxcSharedInfo:
          return Corrupt(rwhere, "an x86 PV record in an x86 HVM stream (Xen's HVM restorer refuses it)");
        case kLibxcToolstack:
          return Unsupported(rwhere, "deprecated TOOLSTACK record (Xen's HVM restorer refuses it)");
        case kLibxcCheckpoint:
        case kLibxcCheckpointDirtyPfnList:
          return Unsupported(rwhere, "checkpointed (Remus/COLO) streams are not supported");
        default:
          if (!(r.type & kRecordOptional)) {
            return Unsupported(rwhere, "unknown mandatory record type (bit 31 clear; a newer Xen wrote this)");
          }
          HLT_RETURN_IF_ERROR(Deliver(r, batches));
          break;
      }
    }
  }

  Status Deliver(const RawRecord& r, uint32_t batches) {
    return visitor_.OnLibxcRecord(LibxcRecord{r.index, r.offset, batches, r.type, r.body});
  }

  Status CheckHvmParams(const RawRecord& r) const {
    const std::string where = RecordWhere(Layer::kLibxc, r);
    if (r.body.size() < kHvmParamsHeaderSize) {
      return Corrupt(where, "body length " + std::to_string(r.body.size()) + " (expected at least 8)");
    }
    uint32_t count = LoadLe32(r.body.data());
    if (LoadLe32(r.body.data() + 4) != 0) return Corrupt(where, "reserved field not zero");
    uint64_t expected = kHvmParamsHeaderSize + uint64_t{count} * kHvmParamsEntrySize;
    if (r.body.size() != expected) {
      return Corrupt(where, "body length " + std::to_string(r.body.size()) + " (expected 8 + 16 x count " +
                                std::to_string(count) + " = " + std::to_string(expected) + ")");
    }
    return Status::Ok();
  }

  Status HandlePageData(const RawRecord& r, uint32_t batch_index) {
    const std::string where = RecordWhere(Layer::kLibxc, r);
    const uint8_t* body = r.body.data();
    const size_t length = r.body.size();
    if (length < kPageDataHeaderSize) {
      return Corrupt(where, "body length " + std::to_string(length) + " (expected at least 8: count, reserved)");
    }
    uint32_t count = LoadLe32(body);
    if (count == 0 || count > opt_.max_pfns_per_record) {
      return Corrupt(where, "count " + std::to_string(count) + " (expected 1.." +
                                std::to_string(opt_.max_pfns_per_record) + ")");
    }
    if (uint32_t reserved = LoadLe32(body + 4); reserved != 0) {
      return Corrupt(where, "reserved field " + fmt::format("{:#x}", reserved) + " (must be zero)");
    }
    const uint64_t table_end = kPageDataHeaderSize + uint64_t{count} * 8;
    if (length < table_end) {
      return Corrupt(where, "body length " + std::to_string(length) + " too short for " + std::to_string(count) +
                                " pfn entries (needs at least " + std::to_string(table_end) + ")");
    }
    entries_.resize(count);
    uint64_t with_data = 0;
    for (uint32_t i = 0; i < count; ++i) {
      uint64_t raw = LoadLe64(body + kPageDataHeaderSize + 8 * uint64_t{i});
      uint8_t type = static_cast<uint8_t>(raw >> kPfnTypeShift);
      uint64_t pfn = raw & kPfnMask;
      std::string entry = "pfn entry " + std::to_string(i) + " (" + fmt::format("{:#x}", raw) + ")";
      if (raw & kPfnReservedMask) return Corrupt(where, entry + ": reserved bits 52-59 set");
      if (!IsKnownPageType(type)) return Corrupt(where, entry + ": page type " + fmt::format("{:#x}", type) + " is reserved");
      if (pfn > opt_.max_pfn) {
        return Corrupt(where, entry + ": pfn " + fmt::format("{:#x}", pfn) + " beyond the limit " + fmt::format("{:#x}", opt_.max_pfn));
      }
      entries_[i] = PageEntry{pfn, static_cast<PageType>(type), nullptr};
      if (PageTypeHasData(type)) ++with_data;
    }
    const uint64_t expected = table_end + with_data * kPageSize;
    if (length != expected) {
      return Corrupt(where, "body length " + std::to_string(length) + " (expected 8 + 8 x " +
                                std::to_string(count) + " + 4096 x " + std::to_string(with_data) + " = " +
                                std::to_string(expected) + ": " + std::to_string(with_data) +
                                " entries carry data)");
    }
    HLT_RETURN_IF_ERROR(CheckNoDuplicatePfns(where));
    const uint8_t* data = body + table_end;
    for (auto& e : entries_) {
      if (PageTypeHasData(static_cast<uint8_t>(e.type))) {
        e.data = data;
        data += kPageSize;
      }
    }
    return visitor_.OnPageBatch(PageBatch{r.index, batch_index, r.offset, entries_});
  }

  // Savers build each batch from a bitmap, so a pfn twice in one record is damage, not a live-migration resend.
  Status CheckNoDuplicatePfns(const std::string& where) {
    sorted_.resize(entries_.size());
    for (size_t i = 0; i < entries_.size(); ++i) sorted_[i] = {entries_[i].pfn, static_cast<uint32_t>(i)};
    std::sort(sorted_.begin(), sorted_.end());
    for (size_t i = 1; i < sorted_.size(); ++i) {
      if (sorted_[i].first == sorted_[i - 1].first) {
        return Corrupt(where, "pfn " + fmt::format("{:#x}", sorted_[i].first) + " appears twice (entries " +
                                  std::to_string(sorted_[i - 1].second) + " and " +
                                  std::to_string(sorted_[i].second) + "); a batch holds each pfn once");
      }
    }
    return Status::Ok();
  }

  SequentialSource& source_;
  StreamVisitor& visitor_;
  const ReadOptions& opt_;
  uint64_t offset_ = 0;
  std::vector<uint8_t> body_;
  std::vector<PageEntry> entries_;
  std::vector<std::pair<uint64_t, uint32_t>> sorted_;
};

}  // namespace

const char* StreamFormatName(StreamFormat format) {
  switch (format) {
    case StreamFormat::kXl: return "xl";
    case StreamFormat::kLibxl: return "libxl";
    case StreamFormat::kLibxc: return "libxc";
  }
  return "?";
}

Result<StreamFormat> ParseStreamFormat(std::string_view name) {
  for (StreamFormat f : {StreamFormat::kXl, StreamFormat::kLibxl, StreamFormat::kLibxc}) {
    if (name == StreamFormatName(f)) return f;
  }
  return Status::InvalidArgument("expected xl, libxl or libxc, got \"" + std::string(name) + "\"");
}

Result<StreamFormat> DetectStreamFormat(std::span<const uint8_t> head) {
  if (head.size() >= 8) {
    if (std::memcmp(head.data(), kXlMagic, 8) == 0) return StreamFormat::kXl;
    if (LoadBe64(head.data()) == kLibxlIdent) return StreamFormat::kLibxl;
    if (LoadBe64(head.data()) == kLibxcMarker) return StreamFormat::kLibxc;
  }
  return Status::Corrupt("not a Xen save stream: the first 8 bytes match neither the xl magic, the libxl ident "
                         "nor the libxc marker");
}

Status ReadStream(SequentialSource& source, StreamVisitor& visitor, const ReadOptions& options) {
  return Reader(source, visitor, options).Run();
}

Status ParseStreamFromMemory(const uint8_t* data, size_t size, StreamVisitor& visitor) {
  std::span<const uint8_t> bytes(data, size);
  ReadOptions options;
  options.source_name = "memory";
  auto format = DetectStreamFormat(bytes);
  options.format = format ? *format : StreamFormat::kXl;  // let the xl reader explain what is wrong
  MemorySource source(bytes);
  return ReadStream(source, visitor, options);
}

}  // namespace halite::xen
