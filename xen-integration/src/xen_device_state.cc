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
#include "halite/bytes.h"

namespace halite::xen {
namespace {

constexpr char kStateMagic[8] = {'H', 'L', 'T', 'X', 'E', 'N', 'S', 'T'};
constexpr uint32_t kStateVersion = 1;

void PutBytes(std::vector<uint8_t>& out, std::span<const uint8_t> bytes) {
  PutLe32(&out, static_cast<uint32_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// A u32 length, then that many bytes.
Status ReadBytes(ByteCursor& in, std::vector<uint8_t>* out, const std::string& what) {
  HLT_ASSIGN_OR_RETURN(uint32_t n, in.ReadLe32(what + " length"));
  HLT_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, in.ReadBytes(n, what));
  out->assign(bytes.begin(), bytes.end());
  return Status::Ok();
}

}  // namespace

std::vector<uint8_t> EncodeXenState(const XenSaveImage& image) {
  std::vector<uint8_t> out(kStateMagic, kStateMagic + 8);
  PutLe32(&out, kStateVersion);
  PutLe32(&out, 0);
  PutLe32(&out, static_cast<uint32_t>(image.format));
  PutLe32(&out, image.xl_mandatory_flags);
  PutLe32(&out, image.xl_optional_flags);
  PutLe32(&out, image.xl_has_config ? 1 : 0);
  PutBytes(out, image.config);
  PutBytes(out, image.xl_optional_tail);
  PutLe32(&out, image.libxl_options);
  const LibxcHeaders& h = image.libxc;
  for (uint32_t v : {h.version, uint32_t{h.options}, h.domain_type, uint32_t{h.page_shift}, h.xen_major, h.xen_minor}) {
    PutLe32(&out, v);
  }
  PutLe32(&out, static_cast<uint32_t>(image.libxl_records.size()));
  for (const KeptRecord& r : image.libxl_records) {
    PutLe32(&out, r.type);
    PutBytes(out, r.body);
  }
  PutLe32(&out, static_cast<uint32_t>(image.libxc_records.size()));
  for (const KeptRecord& r : image.libxc_records) {
    PutLe32(&out, r.type);
    PutLe32(&out, r.page_batches_before);
    PutBytes(out, r.body);
  }
  PutLe32(&out, static_cast<uint32_t>(image.pages.batch_count()));
  for (size_t b = 0; b < image.pages.batch_count(); ++b) {
    auto runs = image.pages.batch(b);
    PutLe32(&out, static_cast<uint32_t>(runs.size()));
    for (const PageRun& run : runs) {
      PutLe64(&out, run.first_pfn);
      PutLe32(&out, run.count);
      PutLe32(&out, static_cast<uint32_t>(run.type));
    }
  }
  return out;
}

Result<XenSaveImage> DecodeXenState(std::span<const uint8_t> blob) {
  ByteCursor in(blob, 0, "xen state blob");
  XenSaveImage image;
  HLT_ASSIGN_OR_RETURN(std::span<const uint8_t> magic, in.ReadBytes(8, "magic"));
  if (std::memcmp(magic.data(), kStateMagic, 8) != 0) {
    return Status::Corrupt("xen state blob: offset 0x0: magic: not \"HLTXENST\"");
  }
  uint32_t version = 0, flags = 0, format = 0, has_config = 0;
  HLT_ASSIGN_OR_RETURN(version, in.ReadLe32("version"));
  if (version != kStateVersion) {
    return Status::Unsupported("xen state blob version " + std::to_string(version) + " (this build reads 1)");
  }
  HLT_ASSIGN_OR_RETURN(flags, in.ReadLe32("flags"));
  if (flags != 0) return in.Error("flags: reserved bits set");
  HLT_ASSIGN_OR_RETURN(format, in.ReadLe32("format"));
  if (format > static_cast<uint32_t>(StreamFormat::kLibxc)) return in.Error("format: unknown value");
  image.format = static_cast<StreamFormat>(format);
  HLT_ASSIGN_OR_RETURN(image.xl_mandatory_flags, in.ReadLe32("xl mandatory flags"));
  HLT_ASSIGN_OR_RETURN(image.xl_optional_flags, in.ReadLe32("xl optional flags"));
  HLT_ASSIGN_OR_RETURN(has_config, in.ReadLe32("xl has_config"));
  if (has_config > 1) return in.Error("xl has_config: not 0 or 1");
  image.xl_has_config = has_config;
  HLT_RETURN_IF_ERROR(ReadBytes(in, &image.config, "config"));
  HLT_RETURN_IF_ERROR(ReadBytes(in, &image.xl_optional_tail, "xl optional tail"));
  HLT_ASSIGN_OR_RETURN(image.libxl_options, in.ReadLe32("libxl options"));
  uint32_t options = 0, page_shift = 0;
  LibxcHeaders& h = image.libxc;
  HLT_ASSIGN_OR_RETURN(h.version, in.ReadLe32("libxc version"));
  HLT_ASSIGN_OR_RETURN(options, in.ReadLe32("libxc options"));
  HLT_ASSIGN_OR_RETURN(h.domain_type, in.ReadLe32("domain type"));
  HLT_ASSIGN_OR_RETURN(page_shift, in.ReadLe32("page shift"));
  HLT_ASSIGN_OR_RETURN(h.xen_major, in.ReadLe32("xen major"));
  HLT_ASSIGN_OR_RETURN(h.xen_minor, in.ReadLe32("xen minor"));
  if (options > 0xffff || page_shift > 0xffff) return in.Error("libxc headers: 16-bit field out of range");
  h.options = static_cast<uint16_t>(options);
  h.page_shift = static_cast<uint16_t>(page_shift);

  uint32_t n = 0;
  HLT_ASSIGN_OR_RETURN(n, in.ReadLe32Count("libxl record count", 8));
  image.libxl_records.resize(n);
  for (KeptRecord& r : image.libxl_records) {
    HLT_ASSIGN_OR_RETURN(r.type, in.ReadLe32("libxl record type"));
    HLT_RETURN_IF_ERROR(ReadBytes(in, &r.body, "libxl record body"));
  }
  HLT_ASSIGN_OR_RETURN(n, in.ReadLe32Count("libxc record count", 12));
  image.libxc_records.resize(n);
  for (KeptRecord& r : image.libxc_records) {
    HLT_ASSIGN_OR_RETURN(r.type, in.ReadLe32("libxc record type"));
    HLT_ASSIGN_OR_RETURN(r.page_batches_before, in.ReadLe32("libxc record position"));
    HLT_RETURN_IF_ERROR(ReadBytes(in, &r.body, "libxc record body"));
  }
  uint32_t batches = 0;
  HLT_ASSIGN_OR_RETURN(batches, in.ReadLe32Count("batch count", 4));
  std::vector<PageRun> runs;
  for (uint32_t b = 0; b < batches; ++b) {
    HLT_ASSIGN_OR_RETURN(n, in.ReadLe32Count("run count", 16));
    runs.resize(n);
    for (PageRun& run : runs) {
      uint32_t type = 0;
      HLT_ASSIGN_OR_RETURN(run.first_pfn, in.ReadLe64("run first pfn"));
      HLT_ASSIGN_OR_RETURN(run.count, in.ReadLe32("run length"));
      HLT_ASSIGN_OR_RETURN(type, in.ReadLe32("run page type"));
      if (type > 0xF || !IsKnownPageType(static_cast<uint8_t>(type))) return in.Error("run page type: invalid");
      if (run.count == 0 || run.first_pfn > kX86MaxPfn || kX86MaxPfn - run.first_pfn < run.count - 1) {
        return in.Error("run: empty or beyond the pfn limit");
      }
      run.type = static_cast<PageType>(type);
    }
    image.pages.AddBatchRuns(runs);
  }
  if (!(in.remaining() == 0)) return in.Error("end: trailing bytes");
  return image;
}

}  // namespace halite::xen
