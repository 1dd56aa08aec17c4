// The C API's lazy restore: a thin shell over LazyMemory and RestoreEngine (lazy_memory.h shows the same
// sequence in C++). Parameters go into the C++ option structs one by one, so the C ABI never carries a struct.
#include <cstdint>
#include <memory>
#include <vector>

#include "capi/capi_internal.h"
#include "halite/lazy_memory.h"
#include "halite/restore_engine.h"

struct hlt_restore {
  const halite::CheckpointReader* reader = nullptr;
  halite::RestoreEngineOptions engine_options;
  halite::LazyMemoryOptions memory_options;
  // Destroyed in the order LazyMemory requires: stop the handlers, then the engine they call, then the memory.
  std::unique_ptr<halite::LazyMemory> memory;
  std::unique_ptr<halite::RestoreEngine> engine;
  bool started = false;

  ~hlt_restore() {
    if (memory) memory->Stop();
    engine.reset();
    memory.reset();
  }
};

using halite::capi::Code;
using halite::capi::Invalid;

namespace {

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

extern "C" {

int hlt_restore_probe(void) { return Code(halite::LazyMemory::Probe()); }

int hlt_restore_create(const hlt_reader* reader, hlt_restore** out) {
  if (!reader || !out) return Invalid("hlt_restore_create: NULL argument");
  auto rs = std::make_unique<hlt_restore>();
  rs->reader = reader->reader.get();
  *out = rs.release();
  return HLT_OK;
}

int hlt_restore_set_param(hlt_restore* rs, hlt_restore_param param, int64_t value) {
  if (!rs) return Invalid("hlt_restore_set_param: NULL handle");
  if (rs->started) return Invalid("hlt_restore_set_param: the restore has started; parameters are set before");
  auto& e = rs->engine_options;
  switch (param) {
    case HLT_RESTORE_BACKGROUND_LOADER:
      if (value != 0 && value != 1) return Invalid("HLT_RESTORE_BACKGROUND_LOADER takes 0 or 1");
      e.background_loader = value == 1;
      return HLT_OK;
    case HLT_RESTORE_LOADER_RATE:
      if (value < 0) return Invalid("HLT_RESTORE_LOADER_RATE takes bytes per second >= 0");
      e.loader_rate_bytes_per_s = uint64_t(value);
      return HLT_OK;
    case HLT_RESTORE_PRELOAD_WORKING_SET:
      if (value != 0 && value != 1) return Invalid("HLT_RESTORE_PRELOAD_WORKING_SET takes 0 or 1");
      e.preload_working_set = value == 1;
      return HLT_OK;
    case HLT_RESTORE_PRELOAD_ALL:
      if (value != 0 && value != 1) return Invalid("HLT_RESTORE_PRELOAD_ALL takes 0 or 1");
      e.preload_all = value == 1;
      return HLT_OK;
    case HLT_RESTORE_HANDLER_THREADS:
      if (value < 1 || value > 64) return Invalid("HLT_RESTORE_HANDLER_THREADS takes 1..64");
      rs->memory_options.handler_threads = unsigned(value);
      return HLT_OK;
    case HLT_RESTORE_ZERO_WINDOW_PAGES:
      if (!IsPowerOfTwo(value) || value > 512) return Invalid("HLT_RESTORE_ZERO_WINDOW_PAGES takes a power of two 1..512");
      e.zero_window_pages = uint32_t(value);
      return HLT_OK;
    case HLT_RESTORE_PREDICT_SEGMENT_PAGES:
      if (value < 0 || value > UINT32_MAX) return Invalid("HLT_RESTORE_PREDICT_SEGMENT_PAGES takes 0..2^32-1");
      e.predict_segment_pages = uint32_t(value);
      return HLT_OK;
    case HLT_RESTORE_PREDICT_THRESHOLD:
      if (value < 0 || value > UINT32_MAX) return Invalid("HLT_RESTORE_PREDICT_THRESHOLD takes 0..2^32-1");
      e.predict_threshold = uint32_t(value);
      return HLT_OK;
    case HLT_RESTORE_MAX_READ_ATTEMPTS:
      if (value < 1 || value > 1000) return Invalid("HLT_RESTORE_MAX_READ_ATTEMPTS takes 1..1000");
      e.max_read_attempts = unsigned(value);
      return HLT_OK;
  }
  return Invalid("hlt_restore_set_param: unknown parameter");
}

int hlt_restore_start(hlt_restore* rs, void* const* bases, uint32_t base_count) {
  if (!rs) return Invalid("hlt_restore_start: NULL handle");
  if (rs->started) return Invalid("hlt_restore_start: already started");
  const auto& regions = rs->reader->regions();
  if (bases && base_count != regions.size()) return Invalid("hlt_restore_start: one base per region is needed");
  rs->started = true;
  auto memory = bases ? halite::LazyMemory::Attach(regions, std::span<void* const>(bases, base_count), rs->memory_options)
                      : halite::LazyMemory::Create(regions, rs->memory_options);
  if (!memory) return Code(memory.error());
  rs->memory = std::move(*memory);
  auto engine = halite::RestoreEngine::Create(*rs->reader, rs->memory->sink(), rs->engine_options);
  if (!engine) return Code(engine.error());
  rs->engine = std::move(*engine);
  // Faults are served from before the preload, so a guest thread already touching memory is never stuck.
  halite::Status s = rs->memory->Serve(*rs->engine);
  if (s.ok()) s = rs->engine->Start();
  return Code(s);
}

void* hlt_restore_region_base(const hlt_restore* rs, uint32_t region) {
  if (!rs || !rs->memory || region >= rs->reader->regions().size()) return nullptr;
  return rs->memory->base(region);
}

int hlt_restore_wait(hlt_restore* rs) {
  if (!rs || !rs->engine) return Invalid("hlt_restore_wait: not started");
  return Code(rs->engine->WaitForLoader());
}

int hlt_restore_get_stat(const hlt_restore* rs, hlt_restore_stat stat, uint64_t* value) {
  if (!rs || !value) return Invalid("hlt_restore_get_stat: NULL argument");
  const halite::RestoreEngineStats e = rs->engine ? rs->engine->Stats() : halite::RestoreEngineStats{};
  switch (stat) {
    case HLT_RESTORE_STAT_FAULTS_BLOCKING: *value = e.faults_blocking; return HLT_OK;
    case HLT_RESTORE_STAT_FAULTS_ZERO: *value = e.faults_zero; return HLT_OK;
    case HLT_RESTORE_STAT_FAULTS_PRESENT: *value = e.faults_present; return HLT_OK;
    case HLT_RESTORE_STAT_FAULTS_FAILED: *value = e.faults_failed; return HLT_OK;
    case HLT_RESTORE_STAT_BLOCKS_TOTAL: *value = rs->reader->blocks().size(); return HLT_OK;
    case HLT_RESTORE_STAT_BLOCKS_READ: *value = e.blocks_read; return HLT_OK;
    case HLT_RESTORE_STAT_BLOCKS_READ_DEMAND: *value = e.blocks_read_demand; return HLT_OK;
    case HLT_RESTORE_STAT_BLOCKS_READ_LOADER: *value = e.blocks_read_loader; return HLT_OK;
    case HLT_RESTORE_STAT_BYTES_READ: *value = e.bytes_read; return HLT_OK;
    case HLT_RESTORE_STAT_PAGES_INSTALLED: *value = e.pages_installed; return HLT_OK;
    case HLT_RESTORE_STAT_ZERO_PAGES_INSTALLED: *value = e.zero_pages_installed; return HLT_OK;
    case HLT_RESTORE_STAT_UFFD_FAULTS: *value = rs->memory ? rs->memory->Stats().faults : 0; return HLT_OK;
    case HLT_RESTORE_STAT_LOADER_DONE: *value = e.loader_done ? 1 : 0; return HLT_OK;
  }
  return Invalid("hlt_restore_get_stat: unknown statistic");
}

void hlt_restore_destroy(hlt_restore* rs) { delete rs; }

}  // extern "C"
