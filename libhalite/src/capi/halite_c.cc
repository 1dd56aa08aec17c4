// The C API: a thin shell over CheckpointReader and CheckpointWriter.
#include "halite/halite_c.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "capi/capi_internal.h"


using halite::capi::Code;
using halite::capi::Invalid;

extern "C" {

const char* hlt_strerror(int code) {
  switch (code) {
    case HLT_OK: return "success";
    case HLT_EINVAL: return "invalid argument";
    case HLT_EIO: return "I/O error";
    case HLT_ECORRUPT: return "corrupt checkpoint";
    case HLT_EUNSUPPORTED: return "unsupported format version or feature";
    case HLT_ENOTFOUND: return "not found";
    case HLT_EAUTH: return "authentication failed";
    case HLT_EABORTED: return "aborted";
    case HLT_EINTERNAL: return "internal error";
  }
  return "unknown error code";
}

const char* hlt_last_error(void) { return halite::capi::LastError().c_str(); }

int hlt_reader_open(const char* path, hlt_reader** out) {
  if (!path || !out) return Invalid("hlt_reader_open: NULL argument");
  return halite::capi::OpenReader(path, nullptr, 0, nullptr, out);
}

int hlt_reader_open_chain(const char* path, const char* const* parent_dirs, size_t parent_dir_count,
                          hlt_reader** out) {
  if (!path || !out || (parent_dir_count > 0 && !parent_dirs)) return Invalid("hlt_reader_open_chain: NULL argument");
  return halite::capi::OpenReader(path, parent_dirs, parent_dir_count, nullptr, out);
}

void hlt_reader_close(hlt_reader* r) { delete r; }

uint32_t hlt_reader_region_count(const hlt_reader* r) { return r ? uint32_t(r->reader->regions().size()) : 0; }

int hlt_reader_region(const hlt_reader* r, uint32_t i, const char** name, uint64_t* base, uint64_t* size) {
  if (!r || i >= r->reader->regions().size()) return Invalid("hlt_reader_region: no such region");
  const auto& reg = r->reader->regions()[i];
  if (name) *name = reg.name.c_str();
  if (base) *base = reg.guest_phys_base;
  if (size) *size = reg.size;
  return HLT_OK;
}

uint32_t hlt_reader_block_count(const hlt_reader* r) { return r ? uint32_t(r->reader->blocks().size()) : 0; }

uint64_t hlt_reader_block_size(const hlt_reader* r, uint32_t block) {
  if (!r || block >= r->reader->blocks().size()) return 0;
  return r->reader->blocks()[block].raw_length();
}

int hlt_reader_lookup(const hlt_reader* r, uint32_t region, uint64_t page, int* kind, uint32_t* block,
                      uint32_t* slot) {
  if (!r || region >= r->reader->regions().size() || page >= r->reader->regions()[region].page_count()) {
    return Invalid("hlt_reader_lookup: no such page");
  }
  auto loc = r->reader->Locate(r->reader->GlobalPage({region, page}));
  if (kind) *kind = int(loc.kind);
  if (block) *block = loc.block;
  if (slot) *slot = loc.slot_in_block;
  return HLT_OK;
}

int hlt_reader_read_block(const hlt_reader* r, uint32_t block, void* buf, size_t buf_len) {
  if (!r || !buf) return Invalid("hlt_reader_read_block: NULL argument");
  return Code(r->reader->ReadBlock(block, std::span<uint8_t>(static_cast<uint8_t*>(buf), buf_len)));
}

int hlt_reader_read_page(const hlt_reader* r, uint32_t region, uint64_t page, void* buf) {
  if (!r || !buf || region >= r->reader->regions().size() || page >= r->reader->regions()[region].page_count()) {
    return Invalid("hlt_reader_read_page: no such page");
  }
  return Code(r->reader->ReadPage(r->reader->GlobalPage({region, page}),
                                  std::span<uint8_t>(static_cast<uint8_t*>(buf), HLT_PAGE_SIZE)));
}

int hlt_reader_read_blob(const hlt_reader* r, const char* name, void** data, size_t* len) {
  if (!r || !name || !data || !len) return Invalid("hlt_reader_read_blob: NULL argument");
  auto b = r->reader->ReadBlob(name);
  if (!b) return Code(b.error());
  *data = std::malloc(b->empty() ? 1 : b->size());
  if (!*data) return Code(halite::Status::Internal("out of memory"));
  std::memcpy(*data, b->data(), b->size());
  *len = b->size();
  return HLT_OK;
}

int hlt_writer_create(const char* path, const hlt_writer_options* options, hlt_writer** out) {
  if (!path || !out) return Invalid("hlt_writer_create: NULL argument");
  halite::WriterOptions o;
  o.metadata.creator = "libhalite C API";
  if (options) {
    if (options->block_pages) o.block_pages = options->block_pages;
    if (options->level) o.level = options->level;
    o.threads = options->threads;
    o.rate_limit_bytes_per_s = options->rate_limit_bytes_per_s;
    if (options->policy) {
      auto p = halite::ParseLayoutPolicy(options->policy);
      if (!p) return Code(p.error());
      o.policy = *p;
    }
    if (options->machine_type) o.metadata.machine_type = options->machine_type;
    if (options->vmm_kind > 3) return Invalid("hlt_writer_create: vmm_kind must be 0..3");
    o.metadata.vmm_kind = static_cast<halite::VmmKind>(options->vmm_kind);
  }
  // A C VMM gets encryption the way the tools do: HALITE_ENCRYPT_KEY (format-spec 13).
  if (const char* env = std::getenv("HALITE_ENCRYPT_KEY"); env && *env) {
    auto key = halite::ParseKey(env, "HALITE_ENCRYPT_KEY");
    if (!key) return Code(key.error());
    o.encryption_key = *key;
  }
  auto w = halite::CheckpointWriter::Create(path, o);
  if (!w) return Code(w.error());
  *out = new hlt_writer{std::move(*w), path, std::move(o), false};
  return HLT_OK;
}

int hlt_writer_add_region(hlt_writer* w, const char* name, uint64_t base, uint64_t size, uint32_t* region_out) {
  if (!w || !name) return Invalid("hlt_writer_add_region: NULL argument");
  auto r = w->writer->AddRegion(name, base, size);
  if (!r) return Code(r.error());
  w->regions_added = true;
  if (region_out) *region_out = *r;
  return HLT_OK;
}

int hlt_writer_put_page(hlt_writer* w, uint32_t region, uint64_t page, const void* data) {
  if (!w || !data) return Invalid("hlt_writer_put_page: NULL argument");
  return Code(w->writer->PutPage(region, page, std::span(static_cast<const uint8_t*>(data), HLT_PAGE_SIZE)));
}

int hlt_writer_put_zero_pages(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count) {
  if (!w) return Invalid("hlt_writer_put_zero_pages: NULL writer");
  return Code(w->writer->PutZeroPages(region, first, count));
}

int hlt_writer_add_accessed(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count) {
  if (!w) return Invalid("hlt_writer_add_accessed: NULL writer");
  halite::PageRun run{{region, first}, count, 0};
  return Code(w->writer->AddAccessedPages(std::span(&run, 1)));
}

int hlt_writer_add_blob(hlt_writer* w, const char* name, const void* data, size_t len) {
  if (!w || !name || (!data && len)) return Invalid("hlt_writer_add_blob: NULL argument");
  return Code(w->writer->AddBlob(name, std::span(static_cast<const uint8_t*>(data), len)));
}

int hlt_writer_finish(hlt_writer* w) {
  if (!w) return Invalid("hlt_writer_finish: NULL writer");
  auto s = w->writer->Finish();
  delete w;
  return s ? HLT_OK : Code(s.error());
}

void hlt_writer_abort(hlt_writer* w) { delete w; }

}  // extern "C"
