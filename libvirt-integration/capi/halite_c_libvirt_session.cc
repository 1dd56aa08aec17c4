// The C API's restore sessions into libvirt domains (HLT_SESSION_LIBVIRT, hlt-restore libvirt): built into
// libhalite.so only, over halite::libvirt::RestoreDomain, which restores (or resumes) to completion on the
// session's runner thread; hlt_session_start returns once the guest runs. What all sessions share (the figures,
// the events, wait, stats) is in qemu-integration/capi/halite_c_session.cc.
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "capi/capi_internal.h"
#include "capi_session.h"
#include "halite/halite_c.h"
#include "halite/libvirt/libvirt_restore_session.h"

namespace halite::capi {

struct LibvirtSessionParts {
  libvirt::DomainRestoreOptions options;
  bool resume = false;  // HLT_SESSION_RESUME: the domain is HLT_SESSION_DOMAIN_NAME's
};

namespace {

// The callbacks of the C++ restore: they keep the figures and queue the events.
void SetLibvirtCallbacks(hlt_session* s) {
  libvirt::DomainRestoreOptions& o = s->libvirt->options;
  o.on_notice = [s](const std::string& line) { SessionEvent(s, HLT_EVENT_NOTICE, line); };
  o.on_warning = [s](const std::string& line) { SessionEvent(s, HLT_EVENT_WARNING, line); };
  o.restore.on_started = [s](const std::string& name, const std::string& uuid) {
    {
      std::lock_guard lock(s->mu);
      s->domain = name;
      s->uuid = uuid;
    }
    SessionEvent(s, HLT_EVENT_NOTICE, "domain " + name + " (" + uuid + ") started");
  };
  qemu::CheckpointRestoreOptions& q = o.restore.qemu;
  q.on_running = [s](uint64_t us) { SessionGuestRuns(s, us, "guest running"); };
  q.on_resumed = [s](uint64_t us) { SessionGuestRuns(s, us, "guest resumed"); };
  if (q.progress_interval_ms == 0) q.progress_interval_ms = 50;
  q.on_progress = [s](const RestoreEngineStats& e, const qemu::PushRestoreStats& c) { SessionProgress(s, e, c); };
}

void RunLibvirtRestore(hlt_session* s) {
  libvirt::LibvirtRestoreResult result;
  Status st = libvirt::RestoreDomain(std::move(s->libvirt->options), &result);
  SessionFinished(s, st, result.qemu);
}

}  // namespace

Status NewLibvirtSession(hlt_session* s, const char* checkpoint) {
  s->libvirt = new LibvirtSessionParts;
  s->libvirt->options.checkpoint = checkpoint;
  return Status::Ok();
}

void FreeLibvirtSession(hlt_session* s) {
  delete s->libvirt;
  s->libvirt = nullptr;
}

int LibvirtSetParam(hlt_session* s, hlt_session_param param, int64_t value) {
  libvirt::DomainRestoreOptions& o = s->libvirt->options;
  qemu::CheckpointRestoreOptions& q = o.restore.qemu;
  switch (param) {
    case HLT_SESSION_EAGER: {
      bool eager = false;
      int rc = SessionBool(value, &eager, "HLT_SESSION_EAGER: expected 0 or 1");
      q.lazy = !eager;
      return rc;
    }
    case HLT_SESSION_MEMORY_SHARED:
      return SessionBool(value, &o.shared_memory, "HLT_SESSION_MEMORY_SHARED: expected 0 or 1");
    case HLT_SESSION_CLONE: return SessionBool(value, &o.restore.clone, "HLT_SESSION_CLONE: expected 0 or 1");
    case HLT_SESSION_RESUME: return SessionBool(value, &s->libvirt->resume, "HLT_SESSION_RESUME: expected 0 or 1");
    case HLT_SESSION_LOADER_RATE:
      if (value < 0) return Invalid("HLT_SESSION_LOADER_RATE: expected bytes per second >= 0");
      q.engine.loader_rate_bytes_per_s = uint64_t(value);
      return HLT_OK;
    case HLT_SESSION_START_PAUSED:
      return SessionBool(value, &o.restore.paused, "HLT_SESSION_START_PAUSED: expected 0 or 1");
  }
  return Invalid("hlt_session_set_param: unknown parameter");
}

int LibvirtSetString(hlt_session* s, hlt_session_string option, const char* value) {
  libvirt::DomainRestoreOptions& o = s->libvirt->options;
  switch (option) {
    case HLT_SESSION_CONNECT: o.connect_uri = value; return HLT_OK;
    case HLT_SESSION_DOMAIN_NAME: o.restore.name = value; return HLT_OK;
    case HLT_SESSION_DISK_DIR: o.restore.disk_dir = value; return HLT_OK;
    case HLT_SESSION_IMAGE_DIR: o.image_dir = value; return HLT_OK;
    case HLT_SESSION_RAM_DIR: o.ram_dir = value; return HLT_OK;
    case HLT_SESSION_SERVER_PROGRAM: o.server_program = value; return HLT_OK;
    case HLT_SESSION_STATUS_FILE: o.status_path = value; return HLT_OK;
    case HLT_SESSION_QMP_SOCKET:
    case HLT_SESSION_QEMU_BINARY:
    case HLT_SESSION_QEMU_DIR:
      return Invalid("hlt_session_set_string: an option of HLT_SESSION_QEMU sessions (libvirt starts the domain's "
                     "QEMU)");
  }
  return Invalid("hlt_session_set_string: unknown option");
}

Status LibvirtStart(hlt_session* s) {
  LibvirtSessionParts& p = *s->libvirt;
  libvirt::DomainRestoreOptions& o = p.options;
  if (p.resume) {
    if (o.restore.name.empty()) {
      return Status::InvalidArgument("HLT_SESSION_RESUME: name the domain whose restore to take over "
                                     "(HLT_SESSION_DOMAIN_NAME)");
    }
    if (o.restore.clone || o.shared_memory || !o.restore.qemu.lazy) {
      return Status::InvalidArgument("HLT_SESSION_RESUME: takes over a lazy restore; HLT_SESSION_CLONE, "
                                     "HLT_SESSION_MEMORY_SHARED and HLT_SESSION_EAGER belong to the restore it "
                                     "resumes");
    }
    o.resume_domain = o.restore.name;
  }
  HLT_RETURN_IF_ERROR(MakeReaderOptions(s->open, &o.reader));
  if (o.shared_memory) {
    // The image server reads the same checkpoint: the same block cache and key files.
    HLT_ASSIGN_OR_RETURN(o.server_flags, ServerFlags(s->open, o.reader));
  }
  SetLibvirtCallbacks(s);
  std::lock_guard lock(s->mu);
  if (p.resume) {
    s->resumed = true;
    s->domain = o.resume_domain;  // its UUID is not known before the resume found its QEMU: ""
  }
  s->runner = std::thread(RunLibvirtRestore, s);
  return Status::Ok();
}

}  // namespace halite::capi
