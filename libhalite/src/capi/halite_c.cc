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
  return halite::capi::OpenReader(path, hlt_open_options{}, out);
}

int hlt_reader_open_chain(const char* path, const char* const* parent_dirs, size_t parent_dir_count,
                          hlt_reader** out) {
  if (!path || !out || (parent_dir_count > 0 && !parent_dirs)) return Invalid("hlt_reader_open_chain: NULL argument");
  return hlt_reader_open_keyed(path, parent_dirs, parent_dir_count, nullptr, out);
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

}  // extern "C"
