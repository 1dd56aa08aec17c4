// The C API's QEMU and libvirt saves (hlt-save qemu, hlt-save libvirt): built into libhalite.so only (the static
// halite_qemu the tools link does not carry it), over SaveQemuToCheckpoint with the options of the caller's
// hlt_writer, or libvirt::SaveLibvirtDomain (halite_c_libvirt_save.cc) with the same options.
#include <cstdint>
#include <memory>
#include <string>

#include "capi/capi_internal.h"
#include "capi_save.h"
#include "halite/halite_c.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_qmp_client.h"

using halite::capi::Code;
using halite::capi::Invalid;

namespace {

int SetThen(hlt_save* s, int64_t v) {
  using Then = halite::qemu::SaveOptions::Then;
  if (s->libvirt) {
    if (v < HLT_SAVE_THEN_CONT || v > HLT_SAVE_THEN_DESTROY || v == HLT_SAVE_THEN_QUIT) {
      return Invalid("HLT_SAVE_THEN: a libvirt save expects HLT_SAVE_THEN_CONT, _STOP or _DESTROY");
    }
    s->libvirt_then = int(v);
    return HLT_OK;
  }
  switch (v) {
    case HLT_SAVE_THEN_CONT: s->options.then = Then::kContinue; return HLT_OK;
    case HLT_SAVE_THEN_STOP: s->options.then = Then::kLeaveStopped; return HLT_OK;
    case HLT_SAVE_THEN_QUIT: s->options.then = Then::kQuit; return HLT_OK;
  }
  return Invalid("HLT_SAVE_THEN: a QEMU save expects HLT_SAVE_THEN_CONT, _STOP or _QUIT");
}

uint64_t Micros(double seconds) { return seconds > 0 ? uint64_t(seconds * 1e6) : 0; }

}  // namespace

extern "C" {

int hlt_qemu_save_create(hlt_writer* writer, const char* qmp_socket, hlt_save** out) {
  if (!writer || !qmp_socket || !*qmp_socket || !out) return Invalid("hlt_qemu_save_create: NULL or empty argument");
  if (writer->writer || writer->commit_tried) return Invalid("hlt_qemu_save_create: the writer was used already");
  auto* s = new hlt_save{};
  s->writer = writer;
  s->qmp_socket = qmp_socket;
  *out = s;
  return HLT_OK;
}

int hlt_libvirt_save_create(hlt_writer* writer, const char* domain, hlt_save** out) {
  if (!writer || !domain || !*domain || !out) return Invalid("hlt_libvirt_save_create: NULL or empty argument");
  if (writer->writer || writer->commit_tried) return Invalid("hlt_libvirt_save_create: the writer was used already");
  auto* s = new hlt_save{};
  s->writer = writer;
  s->libvirt = true;
  s->domain = domain;
  *out = s;
  return HLT_OK;
}

int hlt_save_set_string(hlt_save* s, hlt_save_string option, const char* value) {
  if (!s || !value) return Invalid("hlt_save_set_string: NULL argument");
  if (s->ran) return Invalid("hlt_save_set_string: after hlt_save_run");
  switch (option) {
    case HLT_SAVE_CONNECT:
      if (!s->libvirt) return Invalid("HLT_SAVE_CONNECT: an option of libvirt saves (hlt_libvirt_save_create)");
      s->connect = value;
      return HLT_OK;
  }
  return Invalid("hlt_save_set_string: unknown option");
}

int hlt_save_set_param(hlt_save* s, hlt_save_param param, int64_t value) {
  if (!s) return Invalid("hlt_save_set_param: NULL save");
  if (s->ran) return Invalid("hlt_save_set_param: after hlt_save_run");
  switch (param) {
    case HLT_SAVE_LIVE:
      if (value != 0 && value != 1) return Invalid("HLT_SAVE_LIVE: expected 0 or 1");
      s->options.live = value == 1;
      return HLT_OK;
    case HLT_SAVE_THEN: return SetThen(s, value);
    case HLT_SAVE_VA_WALK:
      if (value != 0 && value != 1) return Invalid("HLT_SAVE_VA_WALK: expected 0 or 1");
      s->options.va_walk = value == 1;
      return HLT_OK;
    case HLT_SAVE_TIMEOUT_MS:
      if (value < 1 || value > INT32_MAX) return Invalid("HLT_SAVE_TIMEOUT_MS: expected 1..2^31-1");
      s->connect_timeout_ms = int(value);
      s->options.timeout_ms = int(value);
      return HLT_OK;
  }
  return Invalid("hlt_save_set_param: unknown parameter");
}

int hlt_save_run(hlt_save* s) {
  if (!s) return Invalid("hlt_save_run: NULL save");
  if (s->ran) return Invalid("hlt_save_run: a save runs once");
  s->ran = true;
  hlt_writer& w = *s->writer;
  auto writer_options = halite::capi::PrepareWriterOptions(w);
  if (!writer_options) return Code(writer_options.error());
  if (w.options.metadata.creator == "libhalite C API") writer_options->metadata.creator = "libhalite C API qemu";
  s->options.writer = std::move(*writer_options);
  s->options.before_finish = [&w](halite::CheckpointWriter& cw) { return halite::capi::ApplyHintFiles(w, cw); };
  if (s->libvirt) {
    if (w.options.metadata.creator == "libhalite C API") s->options.writer.metadata.creator = "libhalite C API libvirt";
    w.commit_tried = true;  // the save commits the writer's checkpoint, or leaves nothing
    auto r = halite::capi::SaveLibvirt(s->connect, s->domain, w.path, s->libvirt_then, std::move(s->options));
    if (!r) return Code(r.error());
    w.summary = r->summary;
    s->result = std::make_unique<halite::qemu::CheckpointSaveResult>(std::move(*r));
    return HLT_OK;
  }
  auto qmp = halite::qemu::QmpClient::Connect(s->qmp_socket, s->connect_timeout_ms);
  if (!qmp) return Code(qmp.error());
  w.commit_tried = true;  // the save commits the writer's checkpoint, or leaves nothing
  auto r = halite::qemu::SaveQemuToCheckpoint(**qmp, w.path, std::move(s->options));
  if (!r) return Code(r.error());
  w.summary = r->summary;
  s->result = std::make_unique<halite::qemu::CheckpointSaveResult>(std::move(*r));
  return HLT_OK;
}

int hlt_save_get_stat(const hlt_save* s, hlt_save_stat stat, uint64_t* value) {
  if (!s || !value) return Invalid("hlt_save_get_stat: NULL argument");
  if (!s->result) return Invalid("hlt_save_get_stat: before a successful hlt_save_run");
  const halite::qemu::CheckpointSaveResult& r = *s->result;
  switch (stat) {
    case HLT_SAVE_STAT_RAMBLOCKS: *value = r.blocks; return HLT_OK;
    case HLT_SAVE_STAT_DATA_PAGES: *value = r.data_pages; return HLT_OK;
    case HLT_SAVE_STAT_ZERO_PAGES: *value = r.zero_pages; return HLT_OK;
    case HLT_SAVE_STAT_STREAM_BYTES: *value = r.save.stream.bytes; return HLT_OK;
    case HLT_SAVE_STAT_STREAM_US: *value = Micros(r.stream_seconds); return HLT_OK;
    case HLT_SAVE_STAT_GUEST_STOPPED_US: *value = Micros(r.guest_stopped_seconds); return HLT_OK;
    case HLT_SAVE_STAT_STATE_BLOB_BYTES: *value = r.state_blob_bytes; return HLT_OK;
    case HLT_SAVE_STAT_LIVE: *value = r.live ? 1 : 0; return HLT_OK;
    case HLT_SAVE_STAT_TOTAL_US: *value = Micros(r.total_seconds); return HLT_OK;
  }
  return Invalid("hlt_save_get_stat: unknown statistic");
}

void hlt_save_free(hlt_save* s) { delete s; }

}  // extern "C"
