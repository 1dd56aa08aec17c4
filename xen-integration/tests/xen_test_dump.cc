#include "xen_test_dump.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "halite/bytes.h"
#include "halite/xen/xen_stream_writer.h"

namespace halite::xen::testing {
namespace {

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string Name(const char* name, uint32_t type) {
  if (std::strncmp(name, "UNKNOWN", 7) == 0) return Format("%s 0x%x", name, type);
  return name;
}

std::string Fnv(std::span<const uint8_t> b) { return Fnv1a64Hex(b.data(), b.size()); }

}  // namespace

std::string Fnv1a64Hex(const uint8_t* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325;
  for (size_t i = 0; i < n; ++i) h = (h ^ data[i]) * 0x100000001b3;
  return Format("%016" PRIx64, h);
}

Status DumpVisitor::OnXlHeader(const XlHeader& h) {
  if (!h.has_config) {
    lines_.push_back(Format("xl mandatory=0x%x optional=0x%x no-config", h.mandatory_flags, h.optional_flags));
  } else {
    lines_.push_back(Format("xl mandatory=0x%x optional=0x%x config=%zu fnv=%s tail=%zu", h.mandatory_flags,
                            h.optional_flags, h.config.size(), Fnv(h.config).c_str(), h.optional_tail.size()));
  }
  return Status::Ok();
}

Status DumpVisitor::OnLibxlHeader(const LibxlHeader& h) {
  lines_.push_back(Format("libxl-header options=0x%x", h.options));
  return Status::Ok();
}

Status DumpVisitor::OnLibxlRecord(const LibxlRecord& r) {
  lines_.push_back(Format("libxl-record index=%u offset=0x%" PRIx64 " type=%s length=%zu fnv=%s", r.index, r.offset,
                          Name(LibxlRecordName(r.type), r.type).c_str(), r.body.size(), Fnv(r.body).c_str()));
  return Status::Ok();
}

Status DumpVisitor::OnLibxcHeaders(const LibxcHeaders& h) {
  lines_.push_back(Format("libxc-headers offset=0x%" PRIx64 " version=%u options=0x%x domain=%u page_shift=%u xen=%u.%u",
                          h.offset, h.version, h.options, h.domain_type, h.page_shift, h.xen_major, h.xen_minor));
  return Status::Ok();
}

Status DumpVisitor::OnStaticDataEndInferred(uint64_t offset) {
  lines_.push_back(Format("static-data-end-inferred offset=0x%" PRIx64, offset));
  return Status::Ok();
}

Status DumpVisitor::OnLibxcRecord(const LibxcRecord& r) {
  lines_.push_back(Format("libxc-record index=%u offset=0x%" PRIx64 " batches_before=%u type=%s length=%zu fnv=%s",
                          r.index, r.offset, r.page_batches_before, Name(LibxcRecordName(r.type), r.type).c_str(),
                          r.body.size(), Fnv(r.body).c_str()));
  return Status::Ok();
}

Status DumpVisitor::OnPageBatch(const PageBatch& b) {
  lines_.push_back(Format("page-batch index=%u batch=%u offset=0x%" PRIx64 " count=%zu", b.record_index,
                          b.batch_index, b.offset, b.entries.size()));
  for (const PageEntry& e : b.entries) {
    lines_.push_back(Format("page pfn=0x%" PRIx64 " type=0x%x fnv=%s", e.pfn, static_cast<unsigned>(e.type),
                            e.data ? Fnv1a64Hex(e.data, kPageSize).c_str() : "-"));
  }
  return Status::Ok();
}

Status DumpVisitor::OnStreamEnd() {
  lines_.push_back("end");
  return Status::Ok();
}

std::string DumpVisitor::text() const {
  std::string out;
  for (const auto& l : lines_) out += l + "\n";
  return out;
}

Status MemoryPageStore::OnPages(const PageBatch& batch) {
  for (const PageEntry& e : batch.entries) {
    auto& slot = pages_[e.pfn];
    slot.first = e.type;
    if (e.data) {
      slot.second.assign(e.data, e.data + kPageSize);
    } else {
      slot.second.clear();
    }
  }
  return Status::Ok();
}

Status MemoryPageStore::ReadPages(std::span<const uint64_t> pfns, uint8_t* out) {
  for (size_t i = 0; i < pfns.size(); ++i) {
    auto it = pages_.find(pfns[i]);
    if (it == pages_.end() || it->second.second.size() != kPageSize) {
      return Status::NotFound(Format("page store: no data for pfn 0x%" PRIx64, pfns[i]));
    }
    std::memcpy(out + i * kPageSize, it->second.second.data(), kPageSize);
  }
  return Status::Ok();
}

PageState MemoryPageStore::State() const {
  PageState s;
  for (const auto& [pfn, slot] : pages_) {
    s[pfn] = {slot.first, slot.second.empty() ? "-" : Fnv1a64Hex(slot.second.data(), kPageSize)};
  }
  return s;
}

PageType SynthType(uint64_t pfn) {
  if (pfn >= 0xA0 && pfn < 0xC0) return PageType::kXtab;  // the legacy VGA hole
  if (pfn % 4099 == 7) return PageType::kXalloc;
  if (pfn % 65521 == 100) return PageType::kXtab;         // a ballooned-out page now and then
  return PageType::kNormal;
}

void SynthPage(uint64_t pfn, uint8_t* out) {
  if (pfn % 97 == 13) {  // zero pages, as guests have plenty
    std::memset(out, 0, kPageSize);
    return;
  }
  uint64_t x = pfn * 0x9e3779b97f4a7c15 + 1;  // splitmix64
  for (size_t i = 0; i < kPageSize; i += 8) {
    x += 0x9e3779b97f4a7c15;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    z ^= z >> 31;
    std::memcpy(out + i, &z, 8);
  }
}

Status SynthPageSource::ReadPages(std::span<const uint64_t> pfns, uint8_t* out) {
  for (size_t i = 0; i < pfns.size(); ++i) SynthPage(pfns[i], out + i * kPageSize);
  return Status::Ok();
}

XenSaveImage MakeSynthImage(uint64_t pages) {
  XenSaveImage image;
  image.format = StreamFormat::kXl;
  image.xl_has_config = true;
  std::string config = R"({"c_info":{"type":"hvm","name":"synthetic"},"b_info":{"max_memkb":)" +
                       std::to_string(pages * 4) + "}}";
  image.config.assign(config.begin(), config.end());
  image.config.push_back(0);
  image.libxc.version = kLibxcVersion;
  image.libxc.domain_type = kDomainTypeX86Hvm;
  image.libxc.page_shift = kPageShift;
  image.libxc.xen_major = 4;
  image.libxc.xen_minor = 17;
  for (uint64_t pfn = 0; pfn < pages; ++pfn) image.pages.AppendEntry(pfn, SynthType(pfn));

  std::vector<uint8_t> cpuid(2 * kCpuidLeafSize, 0x11), msr(kMsrEntrySize, 0);
  std::vector<uint8_t> ctx;
  auto put16 = [&](uint16_t v) { PutLe16(&ctx, v); };
  auto put32 = [&](uint32_t v) { PutLe32(&ctx, v); };
  put16(kHvmCodeHeader); put16(0); put32(kHvmSaveHeaderSize);
  put32(kHvmFileMagic); put32(kHvmFileVersion); put32(0); put32(0); put32(0x906ea); put32(2400000);
  put16(kHvmCodeCpu); put16(0); put32(kHvmHwCpuSize);
  size_t cpu = ctx.size();
  ctx.resize(cpu + kHvmHwCpuSize, 0);
  ctx[cpu + kHvmHwCpuCr3Offset + 1] = 0x10;  // cr3 = 0x1000
  put16(kHvmCodeEnd); put16(0); put32(0);
  std::pair<uint64_t, uint64_t> params[] = {{1, pages - 1}, {17, pages - 2}};
  const uint32_t batches = static_cast<uint32_t>(image.pages.batch_count());
  image.libxc_records = {
      {kLibxcX86CpuidPolicy, cpuid, 0},
      {kLibxcX86MsrPolicy, msr, 0},
      {kLibxcStaticDataEnd, {}, 0},
      {kLibxcX86TscInfo, MakeTscInfoBody(0, 2400000, 987654321, 1), batches},
      {kLibxcHvmContext, ctx, batches},
      {kLibxcHvmParams, MakeHvmParamsBody(params), batches},
      {kLibxcEnd, {}, batches},
  };
  const uint8_t qemu[] = {'Q', 'E', 'V', 'M', 0, 0, 0, 3, 1, 2, 3};
  image.libxl_records = {
      {kLibxlLibxcContext, {}, 0},
      {kLibxlEmulatorContext, MakeEmulatorBody(kEmulatorQemuUpstream, 0, qemu), 0},
      {kLibxlEnd, {}, 0},
  };
  return image;
}

}  // namespace halite::xen::testing
