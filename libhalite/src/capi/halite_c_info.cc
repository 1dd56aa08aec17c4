// The C API's hlt-restore info, verify and parents: figures of a reader, its chain and its storage statistics.
#include <cstdlib>
#include <cstring>

#include "capi/capi_internal.h"
#include "halite/format_constants.h"

using halite::capi::Code;
using halite::capi::Invalid;

namespace {

const halite::CheckpointCounts& CountsOf(const hlt_reader* r) {
  std::call_once(r->counted, [r] { r->counts = halite::CountCheckpoint(*r->reader); });
  return r->counts;
}

// Figures known from the header and index, without a pass over the page map; false for the others.
bool IndexInfo(const halite::CheckpointReader& r, hlt_info what, uint64_t* v) {
  switch (what) {
    case HLT_INFO_FORMAT_MAJOR: *v = r.format_major(); return true;
    case HLT_INFO_FORMAT_MINOR: *v = r.format_minor(); return true;
    case HLT_INFO_FILE_SIZE: *v = r.file_size(); return true;
    case HLT_INFO_PAGES: *v = halite::RegionPages(r); return true;
    case HLT_INFO_RAW_BYTES: *v = halite::RegionPages(r) * halite::format::kPageSize; return true;
    case HLT_INFO_BLOCKS: *v = r.blocks().size(); return true;
    case HLT_INFO_BLOBS: *v = r.blobs().size(); return true;
    case HLT_INFO_DICTIONARY_BYTES: *v = r.dictionary_size(); return true;
    case HLT_INFO_INDEX_BYTES: *v = r.index_length(); return true;
    case HLT_INFO_RESTORE_ORDER_BLOCKS: *v = r.restore_order().size(); return true;
    case HLT_INFO_WORKING_SET_BLOCKS: *v = r.working_set_blocks(); return true;
    case HLT_INFO_CHAIN_DEPTH: *v = r.chain_depth(); return true;
    case HLT_INFO_AUTHENTICATED: *v = r.authenticated(); return true;
    case HLT_INFO_ENCRYPTED: *v = r.encrypted(); return true;
    case HLT_INFO_SEALED: *v = r.sealed(); return true;
    case HLT_INFO_PAGE_HASHES: *v = r.has_page_hashes(); return true;
    case HLT_INFO_VMM_KIND: *v = uint64_t(r.metadata().vmm_kind); return true;
    case HLT_INFO_CREATED_UNIX_NS: *v = r.metadata().created_unix_ns; return true;
    default: return false;
  }
}

bool CountInfo(const halite::CheckpointCounts& c, hlt_info what, uint64_t* v) {
  switch (what) {
    case HLT_INFO_STORED_PAGES: *v = c.stored; return true;
    case HLT_INFO_DUPLICATE_PAGES: *v = c.duplicates; return true;
    case HLT_INFO_ZERO_PAGES: *v = c.zero; return true;
    case HLT_INFO_ABSENT_PAGES: *v = c.absent; return true;
    case HLT_INFO_COMPRESSED_BLOCKS: *v = c.compressed_blocks; return true;
    case HLT_INFO_FRAMED_BLOCKS: *v = c.framed_blocks; return true;
    case HLT_INFO_DICTIONARY_BLOCKS: *v = c.dict_blocks; return true;
    case HLT_INFO_HOT_BLOCKS: *v = c.hot_blocks; return true;
    case HLT_INFO_BLOCK_BYTES: *v = c.block_bytes; return true;
    case HLT_INFO_BLOB_BYTES: *v = c.blob_bytes; return true;
    default: return false;
  }
}

}  // namespace

extern "C" {

int hlt_reader_get_info(const hlt_reader* r, hlt_info what, uint64_t* value) {
  if (!r || !value) return Invalid("hlt_reader_get_info: NULL argument");
  if (IndexInfo(*r->reader, what, value)) return HLT_OK;
  if (CountInfo(CountsOf(r), what, value)) return HLT_OK;
  return Invalid("hlt_reader_get_info: unknown figure");
}

int hlt_reader_info_json(const hlt_reader* r, char** json) {
  if (!r || !json) return Invalid("hlt_reader_info_json: NULL argument");
  const std::string text = halite::CheckpointInfoJson(*r->reader, CountsOf(r));
  *json = static_cast<char*>(std::malloc(text.size() + 1));
  if (!*json) return Code(halite::Status::Internal("out of memory"));
  std::memcpy(*json, text.c_str(), text.size() + 1);
  return HLT_OK;
}

void hlt_free(void* p) { std::free(p); }

uint32_t hlt_reader_chain_length(const hlt_reader* r) { return r ? uint32_t(r->reader->chain().size()) : 0; }

int hlt_reader_chain_file(const hlt_reader* r, uint32_t level, const char** name, const char** parent_path_hint,
                          uint8_t* file_id) {
  if (!r || level >= r->reader->chain().size()) return Invalid("hlt_reader_chain_file: no such level");
  const halite::ChainLevel& l = r->reader->chain()[level];
  if (name) *name = l.name.c_str();
  if (parent_path_hint) *parent_path_hint = l.path_hint.c_str();
  if (file_id) std::memcpy(file_id, l.file_id.data(), l.file_id.size());
  return HLT_OK;
}

int hlt_reader_chain_get(const hlt_reader* r, uint32_t level, hlt_chain_info what, uint64_t* value) {
  if (!r || !value || level >= r->reader->chain().size()) return Invalid("hlt_reader_chain_get: no such level");
  const halite::ChainLevel& l = r->reader->chain()[level];
  switch (what) {
    case HLT_CHAIN_FILE_SIZE: *value = l.file_size; return HLT_OK;
    case HLT_CHAIN_FORMAT_MINOR: *value = l.format_minor; return HLT_OK;
    case HLT_CHAIN_DEPTH: *value = l.chain_depth; return HLT_OK;
    case HLT_CHAIN_BLOCKS: *value = l.blocks; return HLT_OK;
    case HLT_CHAIN_BLOCK_BYTES: *value = l.block_bytes; return HLT_OK;
    case HLT_CHAIN_LIVE_BLOCKS: *value = l.live_blocks; return HLT_OK;
    case HLT_CHAIN_PAGES: *value = l.pages; return HLT_OK;
    case HLT_CHAIN_BASED_BLOCKS: *value = l.based_blocks; return HLT_OK;
    case HLT_CHAIN_DICTIONARY_BYTES: *value = l.dictionary_bytes; return HLT_OK;
  }
  return Invalid("hlt_reader_chain_get: unknown figure");
}

int hlt_reader_verify(const hlt_reader* r, hlt_progress_fn progress, void* ctx) {
  if (!r) return Invalid("hlt_reader_verify: NULL reader");
  if (!progress) return Code(r->reader->VerifyAll());
  return Code(r->reader->VerifyAll([&](const halite::VerifyProgress& p) { progress(ctx, p.blocks_done, p.blocks_total); }));
}

int hlt_reader_get_stat(const hlt_reader* r, hlt_reader_stat stat, uint64_t* value) {
  if (!r || !value) return Invalid("hlt_reader_get_stat: NULL argument");
  const halite::ReaderStats s = r->reader->read_stats();
  switch (stat) {
    case HLT_READER_STAT_STORAGE_REQUESTS: *value = s.storage_requests; return HLT_OK;
    case HLT_READER_STAT_STORAGE_BYTES: *value = s.storage_bytes; return HLT_OK;
    case HLT_READER_STAT_BLOCKS_FETCHED: *value = s.blocks_fetched; return HLT_OK;
    case HLT_READER_STAT_BLOCK_BYTES_FETCHED: *value = s.block_bytes_fetched; return HLT_OK;
    case HLT_READER_STAT_CACHE_HITS: *value = s.cache_hits; return HLT_OK;
    case HLT_READER_STAT_CACHE_MISSES: *value = s.cache_misses; return HLT_OK;
    case HLT_READER_STAT_CACHE_DROPPED: *value = s.cache_dropped; return HLT_OK;
    case HLT_READER_STAT_CACHE_INSERTS: *value = s.cache_inserts; return HLT_OK;
  }
  return Invalid("hlt_reader_get_stat: unknown statistic");
}

}  // extern "C"
