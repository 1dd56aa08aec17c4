// The XenSaveImage state blob stored as the checkpoint's device state.
//
// Layout, all integers little-endian; "bytes" is a u32 length then that many bytes:
//   "HLTXENST" u32 version (1) u32 flags (0, reserved)
//   u32 format (0 xl, 1 libxl, 2 libxc)
//   u32 xl_mandatory_flags, u32 xl_optional_flags, u32 xl_has_config (0/1), bytes config, bytes xl_optional_tail
//   u32 libxl_options
//   u32 libxc version, options, domain_type, page_shift, xen_major, xen_minor
//   u32 n, n x {u32 type, bytes body}                              libxl records
//   u32 n, n x {u32 type, u32 page_batches_before, bytes body}     libxc records
//   u32 n, n x {u32 runs, runs x {u64 first_pfn, u32 count, u32 type}}   page layout batches
// Nothing follows. A decoder checks every count against the bytes left before allocating.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "halite/xen/xen_save_image.h"
#include "xen_endian.h"

namespace halite::xen {
namespace {

constexpr char kStateMagic[8] = {'H', 'L', 'T', 'X', 'E', 'N', 'S', 'T'};
constexpr uint32_t kStateVersion = 1;

using internal::LoadLe32;
using internal::LoadLe64;
using internal::PutLe32;
using internal::PutLe64;

void PutBytes(std::vector<uint8_t>& out, std::span<const uint8_t> bytes) {
  PutLe32(out, static_cast<uint32_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

class BlobReader {
 public:
  explicit BlobReader(std::span<const uint8_t> blob) : blob_(blob) {}

  Status Fail(const std::string& field, const std::string& what) const {
    char off[24];
    std::snprintf(off, sizeof off, "0x%zx", pos_);
    return Status::Corrupt(std::string("xen state blob at offset ") + off + ": " + field + ": " + what);
  }
  Status Need(size_t n, const std::string& field) const {
    if (blob_.size() - pos_ < n) {
      return Fail(field, "needs " + std::to_string(n) + " bytes, " + std::to_string(blob_.size() - pos_) + " left");
    }
    return Status::Ok();
  }
  Status U32(uint32_t* v, const std::string& field) {
    HLT_RETURN_IF_ERROR(Need(4, field));
    *v = LoadLe32(blob_.data() + pos_);
    pos_ += 4;
    return Status::Ok();
  }
  Status U64(uint64_t* v, const std::string& field) {
    HLT_RETURN_IF_ERROR(Need(8, field));
    *v = LoadLe64(blob_.data() + pos_);
    pos_ += 8;
    return Status::Ok();
  }
  Status Bytes(std::vector<uint8_t>* v, const std::string& field) {
    uint32_t n = 0;
    HLT_RETURN_IF_ERROR(U32(&n, field + " length"));
    HLT_RETURN_IF_ERROR(Need(n, field));
    v->assign(blob_.begin() + pos_, blob_.begin() + pos_ + n);
    pos_ += n;
    return Status::Ok();
  }
  // A count of items of at least `min_item` bytes each: refuse counts the remaining bytes cannot hold.
  Status Count(uint32_t* n, size_t min_item, const std::string& field) {
    HLT_RETURN_IF_ERROR(U32(n, field));
    if (uint64_t{*n} * min_item > blob_.size() - pos_) {
      return Fail(field, std::to_string(*n) + " items cannot fit in the " + std::to_string(blob_.size() - pos_) +
                             " bytes left");
    }
    return Status::Ok();
  }
  bool AtEnd() const { return pos_ == blob_.size(); }
  Status Magic() {
    HLT_RETURN_IF_ERROR(Need(8, "magic"));
    if (std::memcmp(blob_.data(), kStateMagic, 8) != 0) return Fail("magic", "not \"HLTXENST\"");
    pos_ = 8;
    return Status::Ok();
  }

 private:
  std::span<const uint8_t> blob_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> EncodeXenState(const XenSaveImage& image) {
  std::vector<uint8_t> out(kStateMagic, kStateMagic + 8);
  PutLe32(out, kStateVersion);
  PutLe32(out, 0);
  PutLe32(out, static_cast<uint32_t>(image.format));
  PutLe32(out, image.xl_mandatory_flags);
  PutLe32(out, image.xl_optional_flags);
  PutLe32(out, image.xl_has_config ? 1 : 0);
  PutBytes(out, image.config);
  PutBytes(out, image.xl_optional_tail);
  PutLe32(out, image.libxl_options);
  const LibxcHeaders& h = image.libxc;
  for (uint32_t v : {h.version, uint32_t{h.options}, h.domain_type, uint32_t{h.page_shift}, h.xen_major, h.xen_minor}) {
    PutLe32(out, v);
  }
  PutLe32(out, static_cast<uint32_t>(image.libxl_records.size()));
  for (const KeptRecord& r : image.libxl_records) {
    PutLe32(out, r.type);
    PutBytes(out, r.body);
  }
  PutLe32(out, static_cast<uint32_t>(image.libxc_records.size()));
  for (const KeptRecord& r : image.libxc_records) {
    PutLe32(out, r.type);
    PutLe32(out, r.page_batches_before);
    PutBytes(out, r.body);
  }
  PutLe32(out, static_cast<uint32_t>(image.pages.batch_count()));
  for (size_t b = 0; b < image.pages.batch_count(); ++b) {
    auto runs = image.pages.batch(b);
    PutLe32(out, static_cast<uint32_t>(runs.size()));
    for (const PageRun& run : runs) {
      PutLe64(out, run.first_pfn);
      PutLe32(out, run.count);
      PutLe32(out, static_cast<uint32_t>(run.type));
    }
  }
  return out;
}

Result<XenSaveImage> DecodeXenState(std::span<const uint8_t> blob) {
  BlobReader in(blob);
  XenSaveImage image;
  HLT_RETURN_IF_ERROR(in.Magic());
  uint32_t version = 0, flags = 0, format = 0, has_config = 0;
  HLT_RETURN_IF_ERROR(in.U32(&version, "version"));
  if (version != kStateVersion) {
    return Status::Unsupported("xen state blob version " + std::to_string(version) + " (this build reads 1)");
  }
  HLT_RETURN_IF_ERROR(in.U32(&flags, "flags"));
  if (flags != 0) return in.Fail("flags", "reserved bits set");
  HLT_RETURN_IF_ERROR(in.U32(&format, "format"));
  if (format > static_cast<uint32_t>(StreamFormat::kLibxc)) return in.Fail("format", "unknown value");
  image.format = static_cast<StreamFormat>(format);
  HLT_RETURN_IF_ERROR(in.U32(&image.xl_mandatory_flags, "xl mandatory flags"));
  HLT_RETURN_IF_ERROR(in.U32(&image.xl_optional_flags, "xl optional flags"));
  HLT_RETURN_IF_ERROR(in.U32(&has_config, "xl has_config"));
  if (has_config > 1) return in.Fail("xl has_config", "not 0 or 1");
  image.xl_has_config = has_config;
  HLT_RETURN_IF_ERROR(in.Bytes(&image.config, "config"));
  HLT_RETURN_IF_ERROR(in.Bytes(&image.xl_optional_tail, "xl optional tail"));
  HLT_RETURN_IF_ERROR(in.U32(&image.libxl_options, "libxl options"));
  uint32_t options = 0, page_shift = 0;
  LibxcHeaders& h = image.libxc;
  HLT_RETURN_IF_ERROR(in.U32(&h.version, "libxc version"));
  HLT_RETURN_IF_ERROR(in.U32(&options, "libxc options"));
  HLT_RETURN_IF_ERROR(in.U32(&h.domain_type, "domain type"));
  HLT_RETURN_IF_ERROR(in.U32(&page_shift, "page shift"));
  HLT_RETURN_IF_ERROR(in.U32(&h.xen_major, "xen major"));
  HLT_RETURN_IF_ERROR(in.U32(&h.xen_minor, "xen minor"));
  if (options > 0xffff || page_shift > 0xffff) return in.Fail("libxc headers", "16-bit field out of range");
  h.options = static_cast<uint16_t>(options);
  h.page_shift = static_cast<uint16_t>(page_shift);

  uint32_t n = 0;
  HLT_RETURN_IF_ERROR(in.Count(&n, 8, "libxl record count"));
  image.libxl_records.resize(n);
  for (KeptRecord& r : image.libxl_records) {
    HLT_RETURN_IF_ERROR(in.U32(&r.type, "libxl record type"));
    HLT_RETURN_IF_ERROR(in.Bytes(&r.body, "libxl record body"));
  }
  HLT_RETURN_IF_ERROR(in.Count(&n, 12, "libxc record count"));
  image.libxc_records.resize(n);
  for (KeptRecord& r : image.libxc_records) {
    HLT_RETURN_IF_ERROR(in.U32(&r.type, "libxc record type"));
    HLT_RETURN_IF_ERROR(in.U32(&r.page_batches_before, "libxc record position"));
    HLT_RETURN_IF_ERROR(in.Bytes(&r.body, "libxc record body"));
  }
  uint32_t batches = 0;
  HLT_RETURN_IF_ERROR(in.Count(&batches, 4, "batch count"));
  std::vector<PageRun> runs;
  for (uint32_t b = 0; b < batches; ++b) {
    HLT_RETURN_IF_ERROR(in.Count(&n, 16, "run count"));
    runs.resize(n);
    for (PageRun& run : runs) {
      uint32_t type = 0;
      HLT_RETURN_IF_ERROR(in.U64(&run.first_pfn, "run first pfn"));
      HLT_RETURN_IF_ERROR(in.U32(&run.count, "run length"));
      HLT_RETURN_IF_ERROR(in.U32(&type, "run page type"));
      if (type > 0xF || !IsKnownPageType(static_cast<uint8_t>(type))) return in.Fail("run page type", "invalid");
      if (run.count == 0 || run.first_pfn > kX86MaxPfn || kX86MaxPfn - run.first_pfn < run.count - 1) {
        return in.Fail("run", "empty or beyond the pfn limit");
      }
      run.type = static_cast<PageType>(type);
    }
    image.pages.AddBatchRuns(runs);
  }
  if (!in.AtEnd()) return in.Fail("end", "trailing bytes");
  return image;
}

}  // namespace halite::xen
