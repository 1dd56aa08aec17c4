// The C API's writer: options set one at a time (hlt-save's writer flags), the CheckpointWriter made at the first
// region, and the summary hlt-save prints read back as statistics.
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "capi/capi_internal.h"
#include "halite/authentication.h"
#include "halite/block_cache.h"
#include "halite/writer_setup.h"

using halite::capi::Code;
using halite::capi::Invalid;

namespace halite::capi {
namespace {

// --parent: the parent's chain opened with the environment's block cache and keys plus the writer's keyring.
Status OpenParent(hlt_writer& w) {
  ReaderOptions options;
  options.parent_dirs = w.parent_dirs;
  HLT_ASSIGN_OR_RETURN(options.block_cache, BlockCache::FromEnvironment());
  HLT_ASSIGN_OR_RETURN(auto environment, Keyring::FromEnvironment());
  options.keyring = Chain({w.keyring, environment});
  return OpenWriterParent(w.parent, w.path, options, &w.options);
}

}  // namespace

Status ApplyHintFiles(const hlt_writer& w, CheckpointWriter& writer) {
  return halite::ApplyHintFiles(w.access_trace, w.va_hints, writer);
}

Result<WriterOptions> PrepareWriterOptions(hlt_writer& w) {
  if (w.writer) return Status::InvalidArgument(w.path + ": the writer was given content already");
  if (w.commit_tried) return Status::InvalidArgument(w.path + ": this writer has committed (or tried to) already");
  WriterOptions options = w.options;
  if (w.encryption_off) {
    options.encryption_key.reset();
  } else if (!options.encryption_key) {
    // A C VMM gets encryption the way the tools do: HALITE_ENCRYPT_KEY (format-spec 13).
    if (const char* env = std::getenv("HALITE_ENCRYPT_KEY"); env && *env) {
      HLT_ASSIGN_OR_RETURN(options.encryption_key, ParseKey(env, "HALITE_ENCRYPT_KEY"));
    }
  }
  if (!w.parent.empty() && !w.options.parent) HLT_RETURN_IF_ERROR(OpenParent(w));
  if (w.options.parent) {
    options.parent = w.options.parent;
    options.page_hashes = true;
  }
  return options;
}

Status MakeWriter(hlt_writer& w) {
  if (w.writer) return Status::Ok();
  HLT_ASSIGN_OR_RETURN(WriterOptions options, PrepareWriterOptions(w));
  HLT_ASSIGN_OR_RETURN(w.writer, CheckpointWriter::Create(w.path, std::move(options)));
  return Status::Ok();
}

}  // namespace halite::capi

namespace {

int SetFlag(bool* field, int64_t value, const char* name) {
  if (value != 0 && value != 1) return Invalid((std::string(name) + ": expected 0 or 1").c_str());
  *field = value == 1;
  return HLT_OK;
}

int SetRange(int64_t value, int64_t lo, int64_t hi, const char* name) {
  if (value < lo || value > hi) {
    return Invalid((std::string(name) + ": expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                    std::to_string(value)).c_str());
  }
  return HLT_OK;
}

int SetParam(hlt_writer* w, hlt_writer_param param, int64_t v) {
  halite::WriterOptions& o = w->options;
  int rc = HLT_OK;
  switch (param) {
    case HLT_WRITER_BLOCK_PAGES:
      if ((rc = SetRange(v, 1, 4096, "HLT_WRITER_BLOCK_PAGES")) == HLT_OK) o.block_pages = uint32_t(v);
      return rc;
    case HLT_WRITER_LEVEL:
      if ((rc = SetRange(v, -131072, 22, "HLT_WRITER_LEVEL")) == HLT_OK) o.level = int(v);
      return rc;
    case HLT_WRITER_THREADS:
      if ((rc = SetRange(v, 0, 1024, "HLT_WRITER_THREADS")) == HLT_OK) o.threads = unsigned(v);
      return rc;
    case HLT_WRITER_RATE_LIMIT:
      if ((rc = SetRange(v, 0, INT64_MAX, "HLT_WRITER_RATE_LIMIT")) == HLT_OK) o.rate_limit_bytes_per_s = uint64_t(v);
      return rc;
    case HLT_WRITER_VMM_KIND:
      if ((rc = SetRange(v, 0, 3, "HLT_WRITER_VMM_KIND")) == HLT_OK) o.metadata.vmm_kind = halite::VmmKind(v);
      return rc;
    case HLT_WRITER_FRAME_PAGES:
      if ((rc = SetRange(v, -1, 4096, "HLT_WRITER_FRAME_PAGES")) == HLT_OK) {
        o.frame_pages = v < 0 ? halite::WriterOptions::kFramePagesAuto : uint32_t(v);
      }
      return rc;
    case HLT_WRITER_PAGE_HASHES: return SetFlag(&o.page_hashes, v, "HLT_WRITER_PAGE_HASHES");
    case HLT_WRITER_PARENT_CODING: return SetFlag(&o.code_against_parent, v, "HLT_WRITER_PARENT_CODING");
    case HLT_WRITER_REWRITE_PERMILLE:
      if ((rc = SetRange(v, 0, 1000000, "HLT_WRITER_REWRITE_PERMILLE")) == HLT_OK) {
        o.parent_rewrite_fraction = double(v) / 1000.0;
      }
      return rc;
    case HLT_WRITER_SYNC: return SetFlag(&o.sink.sync, v, "HLT_WRITER_SYNC");
    case HLT_WRITER_LOW_PRIORITY: return SetFlag(&o.low_priority_workers, v, "HLT_WRITER_LOW_PRIORITY");
    case HLT_WRITER_CIPHER:
      if ((rc = SetRange(v, HLT_CIPHER_AUTO, HLT_CIPHER_XCHACHA20POLY1305, "HLT_WRITER_CIPHER")) == HLT_OK) {
        o.cipher = halite::Cipher(v);
      }
      return rc;
    case HLT_WRITER_ENCRYPTION: {
      bool on = true;
      if ((rc = SetFlag(&on, v, "HLT_WRITER_ENCRYPTION")) == HLT_OK) w->encryption_off = !on;
      return rc;
    }
  }
  return Invalid("hlt_writer_set_param: unknown parameter");
}

int SetString(hlt_writer* w, hlt_writer_string option, const char* v) {
  halite::WriterOptions& o = w->options;
  switch (option) {
    case HLT_WRITER_POLICY: {
      auto p = halite::ParseLayoutPolicy(v);
      if (!p) return Code(p.error());
      o.policy = *p;
      return HLT_OK;
    }
    case HLT_WRITER_DICTIONARY: {
      auto d = halite::ParseDictionaryMode(v);
      if (!d) return Code(d.error());
      o.dictionary = *d;
      return HLT_OK;
    }
    case HLT_WRITER_MACHINE_TYPE: o.metadata.machine_type = v; return HLT_OK;
    case HLT_WRITER_CREATOR: o.metadata.creator = v; return HLT_OK;
    case HLT_WRITER_STAGING_DIR: o.staging_dir = v; return HLT_OK;
    case HLT_WRITER_MAC_KEY_FILE: {
      auto key = halite::ReadMacKeyFile(v);
      if (!key) return Code(key.error());
      o.mac_key = *key;
      return HLT_OK;
    }
    case HLT_WRITER_ENCRYPT_KEY_FILE: {
      auto key = halite::ReadKeyFile(v);
      if (!key) return Code(key.error());
      o.encryption_key = *key;
      return HLT_OK;
    }
    case HLT_WRITER_PARENT: w->parent = v; return HLT_OK;
    case HLT_WRITER_PARENT_DIR: w->parent_dirs.push_back(v); return HLT_OK;
    case HLT_WRITER_ACCESS_TRACE: w->access_trace = v; return HLT_OK;
    case HLT_WRITER_VA_HINTS: w->va_hints = v; return HLT_OK;
  }
  return Invalid("hlt_writer_set_string: unknown option");
}

int Stat(const halite::WriteSummary& s, hlt_writer_stat stat, uint64_t* value) {
  switch (stat) {
    case HLT_WRITER_STAT_PAGES: *value = s.pages; return HLT_OK;
    case HLT_WRITER_STAT_ZERO_PAGES: *value = s.zero_pages; return HLT_OK;
    case HLT_WRITER_STAT_ABSENT_PAGES: *value = s.absent_pages; return HLT_OK;
    case HLT_WRITER_STAT_DUPLICATE_PAGES: *value = s.duplicate_pages; return HLT_OK;
    case HLT_WRITER_STAT_STORED_PAGES: *value = s.stored_pages; return HLT_OK;
    case HLT_WRITER_STAT_BLOCKS: *value = s.blocks; return HLT_OK;
    case HLT_WRITER_STAT_HOT_BLOCKS: *value = s.hot_blocks; return HLT_OK;
    case HLT_WRITER_STAT_ACCESSED_PAGES: *value = s.accessed_pages; return HLT_OK;
    case HLT_WRITER_STAT_RAW_BYTES: *value = s.raw_bytes; return HLT_OK;
    case HLT_WRITER_STAT_FILE_BYTES: *value = s.file_bytes; return HLT_OK;
    case HLT_WRITER_STAT_BLOCK_BYTES: *value = s.block_bytes; return HLT_OK;
    case HLT_WRITER_STAT_BLOB_BYTES: *value = s.blob_bytes; return HLT_OK;
    case HLT_WRITER_STAT_INDEX_BYTES: *value = s.index_bytes; return HLT_OK;
    case HLT_WRITER_STAT_DICTIONARY_BYTES: *value = s.dictionary_bytes; return HLT_OK;
    case HLT_WRITER_STAT_IN_PARENT_PAGES: *value = s.in_parent_pages; return HLT_OK;
    case HLT_WRITER_STAT_FRAME_PAGES: *value = s.frame_pages; return HLT_OK;
    case HLT_WRITER_STAT_ENCRYPTED: *value = s.encrypted ? 1 : 0; return HLT_OK;
    case HLT_WRITER_STAT_MICROSECONDS: *value = uint64_t(s.seconds * 1e6); return HLT_OK;
  }
  return Invalid("hlt_writer_get_stat: unknown statistic");
}

// The CheckpointWriter for a call that gives content: made at the first one.
halite::CheckpointWriter* Ready(hlt_writer* w, int* rc) {
  *rc = Code(halite::capi::MakeWriter(*w));
  return *rc == HLT_OK ? w->writer.get() : nullptr;
}

}  // namespace

extern "C" {

int hlt_writer_create(const char* path, hlt_writer** out) {
  if (!path || !out || !*path) return Invalid("hlt_writer_create: NULL or empty argument");
  auto* w = new hlt_writer{};
  w->path = path;
  w->options.metadata.creator = "libhalite C API";
  *out = w;
  return HLT_OK;
}

int hlt_writer_set_param(hlt_writer* w, hlt_writer_param param, int64_t value) {
  if (!w) return Invalid("hlt_writer_set_param: NULL writer");
  if (w->writer || w->commit_tried) return Invalid("hlt_writer_set_param: after the first region");
  return SetParam(w, param, value);
}

int hlt_writer_set_string(hlt_writer* w, hlt_writer_string option, const char* value) {
  if (!w || !value) return Invalid("hlt_writer_set_string: NULL argument");
  if (w->writer || w->commit_tried) return Invalid("hlt_writer_set_string: after the first region");
  return SetString(w, option, value);
}

int hlt_writer_set_keyring(hlt_writer* w, const hlt_keyring* keyring) {
  if (!w) return Invalid("hlt_writer_set_keyring: NULL writer");
  if (w->writer || w->commit_tried) return Invalid("hlt_writer_set_keyring: after the first region");
  w->keyring = keyring ? keyring->keyring : nullptr;
  return HLT_OK;
}

int hlt_writer_add_region(hlt_writer* w, const char* name, uint64_t base, uint64_t size, uint32_t* region_out) {
  if (!w || !name) return Invalid("hlt_writer_add_region: NULL argument");
  int rc;
  halite::CheckpointWriter* writer = Ready(w, &rc);
  if (!writer) return rc;
  auto r = writer->AddRegion(name, base, size);
  if (!r) return Code(r.error());
  if (region_out) *region_out = *r;
  return HLT_OK;
}

int hlt_writer_put_page(hlt_writer* w, uint32_t region, uint64_t page, const void* data) {
  if (!w || !data) return Invalid("hlt_writer_put_page: NULL argument");
  int rc;
  halite::CheckpointWriter* writer = Ready(w, &rc);
  if (!writer) return rc;
  return Code(writer->PutPage(region, page, std::span(static_cast<const uint8_t*>(data), HLT_PAGE_SIZE)));
}

int hlt_writer_put_zero_pages(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count) {
  if (!w) return Invalid("hlt_writer_put_zero_pages: NULL writer");
  int rc;
  halite::CheckpointWriter* writer = Ready(w, &rc);
  return writer ? Code(writer->PutZeroPages(region, first, count)) : rc;
}

int hlt_writer_attach_image(hlt_writer* w, uint32_t region, const char* image_path) {
  if (!w || !image_path) return Invalid("hlt_writer_attach_image: NULL argument");
  int rc;
  halite::CheckpointWriter* writer = Ready(w, &rc);
  return writer ? Code(writer->AttachImage(region, image_path)) : rc;
}

int hlt_writer_add_raw_image(hlt_writer* w, const char* image_path, uint32_t* region_out) {
  if (!w || !image_path) return Invalid("hlt_writer_add_raw_image: NULL argument");
  struct stat st;
  if (::stat(image_path, &st) != 0) {
    return Code(halite::Status::IoError(std::string(image_path) + ": cannot stat", errno));
  }
  if (st.st_size == 0 || st.st_size % HLT_PAGE_SIZE != 0) {
    return Code(halite::Status::InvalidArgument(std::string(image_path) + ": size " + std::to_string(st.st_size) +
                                                " is not a non-zero multiple of 4096"));
  }
  uint32_t region = 0;
  if (int rc = hlt_writer_add_region(w, "ram", 0, uint64_t(st.st_size), &region); rc != HLT_OK) return rc;
  if (region_out) *region_out = region;
  return hlt_writer_attach_image(w, region, image_path);
}

int hlt_writer_add_accessed(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count) {
  if (!w) return Invalid("hlt_writer_add_accessed: NULL writer");
  int rc;
  halite::CheckpointWriter* writer = Ready(w, &rc);
  if (!writer) return rc;
  halite::PageRun run{{region, first}, count, 0};
  return Code(writer->AddAccessedPages(std::span(&run, 1)));
}

int hlt_writer_add_blob(hlt_writer* w, const char* name, const void* data, size_t len) {
  if (!w || !name || (!data && len)) return Invalid("hlt_writer_add_blob: NULL argument");
  int rc;
  halite::CheckpointWriter* writer = Ready(w, &rc);
  return writer ? Code(writer->AddBlob(name, std::span(static_cast<const uint8_t*>(data), len))) : rc;
}

int hlt_writer_commit(hlt_writer* w) {
  if (!w) return Invalid("hlt_writer_commit: NULL writer");
  int rc;
  halite::CheckpointWriter* writer = Ready(w, &rc);
  if (!writer) return rc;
  w->commit_tried = true;
  halite::Status hints = halite::capi::ApplyHintFiles(*w, *writer);
  auto summary = hints.ok() ? writer->Finish() : halite::Result<halite::WriteSummary>(hints);
  w->writer.reset();  // a failed one leaves nothing behind
  if (!summary) return Code(summary.error());
  w->summary = std::move(*summary);
  return HLT_OK;
}

int hlt_writer_get_stat(const hlt_writer* w, hlt_writer_stat stat, uint64_t* value) {
  if (!w || !value) return Invalid("hlt_writer_get_stat: NULL argument");
  if (!w->summary) return Invalid("hlt_writer_get_stat: before a successful hlt_writer_commit");
  return Stat(*w->summary, stat, value);
}

void hlt_writer_free(hlt_writer* w) { delete w; }

int hlt_writer_finish(hlt_writer* w) {
  if (!w) return Invalid("hlt_writer_finish: NULL writer");
  const int rc = hlt_writer_commit(w);
  delete w;
  return rc;
}

void hlt_writer_abort(hlt_writer* w) { delete w; }

}  // extern "C"
