// The C API's restore sessions into QEMU (hlt-restore qemu): built into libhalite.so only, over
// halite::qemu::RestoreSession. RestoreSession::Start runs on the caller's thread; Run on a thread of the
// session's own, so that hlt_session_start can return once the guest runs while the rest of a lazy restore goes
// on. The figures and events the callbacks report are kept under a mutex for hlt_session_get_stat and
// hlt_session_next_event from any thread.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "capi/capi_internal.h"
#include "capi_session.h"
#include "halite/halite_c.h"
#include "halite/qemu/qemu_restore_session.h"

using halite::capi::Code;
using halite::capi::Invalid;
using halite::capi::SessionBool;

namespace halite::capi {

void SessionEvent(hlt_session* s, hlt_event_kind kind, std::string text) {
  std::lock_guard lock(s->mu);
  s->events.emplace_back(kind, std::move(text));
  s->changed.notify_all();
}

void SessionGuestRuns(hlt_session* s, uint64_t us, const char* what) {
  {
    std::lock_guard lock(s->mu);
    if (s->running_us == 0) s->running_us = us ? us : 1;
    if (s->state == HLT_SESSION_STATE_STARTING) s->state = HLT_SESSION_STATE_RUNNING;
  }
  SessionEvent(s, HLT_EVENT_RUNNING, std::string(what) + " " + std::to_string(us) + " us after the restore began");
}

void SessionProgress(hlt_session* s, const RestoreEngineStats& e, const qemu::PushRestoreStats& c) {
  std::lock_guard lock(s->mu);
  s->pages_sent = c.preload_pages + c.request_pages + c.pushed_pages;
  s->bytes_read = e.bytes_read;
  s->faults = e.faults_blocking;
  s->requests = c.requests;
}

void SessionFinished(hlt_session* s, const Status& st, const qemu::CheckpointRestoreResult& r) {
  std::lock_guard lock(s->mu);
  const auto& c = r.channel;
  s->pages_sent = c.preload_pages + c.request_pages + c.pushed_pages + r.direct.pages_copied + r.direct.pages_zeroed;
  s->bytes_read = r.engine_final.bytes_read;
  s->faults = r.engine.faults_blocking;
  s->requests = c.requests;
  if (r.start_to_running_us) s->running_us = r.start_to_running_us;
  s->done_us = st.ok() ? r.total_us : 0;
  s->run_status = st;
  s->run_done = true;
  s->state = st.ok() ? HLT_SESSION_STATE_DONE : HLT_SESSION_STATE_FAILED;
  s->events.emplace_back(st.ok() ? HLT_EVENT_DONE : HLT_EVENT_FAILED,
                         st.ok() ? "every page in, " + std::to_string(r.total_us) + " us" : st.ToString());
  s->changed.notify_all();
}

int SessionBool(int64_t v, bool* out, const char* what) {
  if (v != 0 && v != 1) return Invalid(what);
  *out = v == 1;
  return HLT_OK;
}

}  // namespace halite::capi

namespace {

void SetCallbacks(hlt_session* s) {
  halite::qemu::RestoreSessionOptions& o = s->options;
  o.on_notice = [s](const std::string& line) { halite::capi::SessionEvent(s, HLT_EVENT_NOTICE, line); };
  o.on_warning = [s](const std::string& line) { halite::capi::SessionEvent(s, HLT_EVENT_WARNING, line); };
  o.on_launched = [s](pid_t pid) {
    std::lock_guard lock(s->mu);
    s->pid = uint64_t(pid);
  };
  o.restore.on_running = [s](uint64_t us) { halite::capi::SessionGuestRuns(s, us, "guest running"); };
  o.restore.on_resumed = [s](uint64_t us) { halite::capi::SessionGuestRuns(s, us, "guest resumed"); };
  if (o.restore.progress_interval_ms == 0) o.restore.progress_interval_ms = 50;
  o.restore.on_progress = [s](const halite::RestoreEngineStats& e, const halite::qemu::PushRestoreStats& c) {
    halite::capi::SessionProgress(s, e, c);
  };
}

// Runs the restore to its end on the session's thread and records the outcome.
void RunRestore(hlt_session* s) {
  halite::Status st = s->session->Run();
  const bool resumable = s->session->resumable();
  if (!st.ok() && resumable) {
    st = halite::Status(st.code(),
                        st.message() + "; QEMU waits with its guest paused: resume with HLT_SESSION_RESUME (" +
                            s->session->ResumeLocator() + ")",
                        st.sys_errno());
  }
  {
    std::lock_guard lock(s->mu);
    s->resumable = resumable;
  }
  halite::capi::SessionFinished(s, st, s->session->result());
}

void Join(hlt_session* s) {
  if (s->runner.joinable()) s->runner.join();
  s->joined = true;
}

// A QEMU session's options that a libvirt session has too, and the reverse, are set where the kind is known.
int QemuSetString(hlt_session* s, hlt_session_string option, const char* value) {
  switch (option) {
    case HLT_SESSION_QMP_SOCKET: s->options.qmp_socket = value; return HLT_OK;
    case HLT_SESSION_QEMU_BINARY: s->options.qemu_binary = value; return HLT_OK;
    case HLT_SESSION_QEMU_DIR: s->options.qemu_dir = value; return HLT_OK;
    case HLT_SESSION_IMAGE_DIR: s->options.image_dir = value; return HLT_OK;
    case HLT_SESSION_SERVER_PROGRAM: s->options.server_program = value; return HLT_OK;
    default: break;
  }
  return Invalid("hlt_session_set_string: not an option of HLT_SESSION_QEMU sessions (libvirt only, or unknown)");
}
}  // namespace

extern "C" {

int hlt_session_create(hlt_session_kind kind, const char* checkpoint, hlt_session** out) {
  if (!checkpoint || !*checkpoint || !out) return Invalid("hlt_session_create: NULL or empty argument");
  if (kind != HLT_SESSION_QEMU && kind != HLT_SESSION_LIBVIRT) {
    return Invalid("hlt_session_create: unknown kind (HLT_SESSION_QEMU or HLT_SESSION_LIBVIRT)");
  }
  auto s = std::make_unique<hlt_session>();
  s->kind = kind;
  if (kind == HLT_SESSION_LIBVIRT) {
    if (halite::Status st = halite::capi::NewLibvirtSession(s.get(), checkpoint); !st.ok()) return Code(st);
  } else {
    s->options.checkpoint = checkpoint;
  }
  *out = s.release();
  return HLT_OK;
}

int hlt_session_set_param(hlt_session* s, hlt_session_param param, int64_t value) {
  if (!s) return Invalid("hlt_session_set_param: NULL session");
  if (s->started) return Invalid("hlt_session_set_param: after hlt_session_start");
  if (s->kind == HLT_SESSION_LIBVIRT) return halite::capi::LibvirtSetParam(s, param, value);
  halite::qemu::CheckpointRestoreOptions& r = s->options.restore;
  switch (param) {
    case HLT_SESSION_EAGER: {
      bool eager = false;
      int rc = SessionBool(value, &eager, "HLT_SESSION_EAGER: expected 0 or 1");
      r.lazy = !eager;
      return rc;
    }
    case HLT_SESSION_MEMORY_SHARED:
      return SessionBool(value, &s->options.shared_memory, "HLT_SESSION_MEMORY_SHARED: expected 0 or 1");
    case HLT_SESSION_RESUME: return SessionBool(value, &s->options.resume, "HLT_SESSION_RESUME: expected 0 or 1");
    case HLT_SESSION_LOADER_RATE:
      if (value < 0) return Invalid("HLT_SESSION_LOADER_RATE: expected bytes per second >= 0");
      r.engine.loader_rate_bytes_per_s = uint64_t(value);
      return HLT_OK;
    case HLT_SESSION_START_PAUSED: return SessionBool(value, &r.paused, "HLT_SESSION_START_PAUSED: expected 0 or 1");
    case HLT_SESSION_CLONE: return Invalid("HLT_SESSION_CLONE: an option of HLT_SESSION_LIBVIRT sessions");
  }
  return Invalid("hlt_session_set_param: unknown parameter");
}

int hlt_session_set_string(hlt_session* s, hlt_session_string option, const char* value) {
  if (!s || !value) return Invalid("hlt_session_set_string: NULL argument");
  if (s->started) return Invalid("hlt_session_set_string: after hlt_session_start");
  if (s->kind == HLT_SESSION_LIBVIRT) return halite::capi::LibvirtSetString(s, option, value);
  return QemuSetString(s, option, value);
}

int hlt_session_add_qemu_arg(hlt_session* s, const char* arg) {
  if (!s || !arg) return Invalid("hlt_session_add_qemu_arg: NULL argument");
  if (s->started) return Invalid("hlt_session_add_qemu_arg: after hlt_session_start");
  s->options.qemu_args.emplace_back(arg);
  return HLT_OK;
}

int hlt_session_set_open_options(hlt_session* s, const hlt_open_options* options) {
  if (!s || !options) return Invalid("hlt_session_set_open_options: NULL argument");
  if (s->started) return Invalid("hlt_session_set_open_options: after hlt_session_start");
  s->open = *options;
  return HLT_OK;
}

int hlt_session_start(hlt_session* s) {
  if (!s) return Invalid("hlt_session_start: NULL session");
  if (s->started) return Invalid("hlt_session_start: a session starts once");
  s->started = true;
  {
    std::lock_guard lock(s->mu);
    s->state = HLT_SESSION_STATE_STARTING;
  }
  halite::Status st;
  if (s->kind == HLT_SESSION_LIBVIRT) {
    st = halite::capi::LibvirtStart(s);
  } else {
    st = halite::capi::MakeReaderOptions(s->open, &s->options.reader);
    if (st.ok() && s->options.shared_memory) {
      auto flags = halite::capi::ServerFlags(s->open, s->options.reader);
      st = flags.status();
      if (flags) s->options.server_flags = std::move(*flags);
    }
    if (st.ok()) {
      SetCallbacks(s);
      auto session = halite::qemu::RestoreSession::Start(s->options);
      st = session.status();
      if (session) s->session = std::move(*session);
    }
    if (st.ok()) {
      std::lock_guard lock(s->mu);
      s->pid = uint64_t(s->session->qemu_pid());
      s->resumed = s->session->resuming();
      s->runner = std::thread(RunRestore, s);
    }
  }
  if (!st.ok()) {
    std::lock_guard lock(s->mu);
    s->state = HLT_SESSION_STATE_FAILED;
    s->run_done = true;
    s->run_status = st;
    s->events.emplace_back(HLT_EVENT_FAILED, st.ToString());
    s->joined = true;
    return Code(st);
  }
  std::unique_lock lock(s->mu);
  s->changed.wait(lock, [s] { return s->run_done || s->state == HLT_SESSION_STATE_RUNNING; });
  if (s->run_done && !s->run_status.ok()) return Code(s->run_status);
  return HLT_OK;
}

int hlt_session_wait(hlt_session* s, int64_t timeout_ms) {
  if (!s) return Invalid("hlt_session_wait: NULL session");
  if (!s->started) return Invalid("hlt_session_wait: before hlt_session_start");
  halite::Status st;
  {
    std::unique_lock lock(s->mu);
    auto done = [s] { return s->run_done; };
    if (timeout_ms < 0) {
      s->changed.wait(lock, done);
    } else if (!s->changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
      return Code(halite::Status::Aborted("hlt_session_wait: the restore goes on after " +
                                          std::to_string(timeout_ms) + " ms"));
    }
    st = s->run_status;
  }
  Join(s);
  return Code(st);
}

int hlt_session_detach(hlt_session* s) {
  if (!s) return Invalid("hlt_session_detach: NULL session");
  {
    std::lock_guard lock(s->mu);
    if (!s->run_done) return Invalid("hlt_session_detach: the restore goes on; hlt_session_wait for its end first");
  }
  Join(s);
  if (s->kind == HLT_SESSION_LIBVIRT) {
    // libvirt's domain never belonged to the session: there is nothing to let go of.
    if (s->domain.empty()) return Invalid("hlt_session_detach: the session did not start a domain");
  } else {
    if (!s->session) return Invalid("hlt_session_detach: the session did not start");
    s->session->Detach();
  }
  std::lock_guard lock(s->mu);
  s->state = HLT_SESSION_STATE_DETACHED;
  return HLT_OK;
}

int hlt_session_get_stat(const hlt_session* s, hlt_session_stat stat, uint64_t* value) {
  if (!s || !value) return Invalid("hlt_session_get_stat: NULL argument");
  std::lock_guard lock(s->mu);
  switch (stat) {
    case HLT_SESSION_STAT_STATE: *value = uint64_t(s->state); return HLT_OK;
    case HLT_SESSION_STAT_QEMU_PID: *value = s->pid; return HLT_OK;
    case HLT_SESSION_STAT_RUNNING_US: *value = s->running_us; return HLT_OK;
    case HLT_SESSION_STAT_DONE_US: *value = s->done_us; return HLT_OK;
    case HLT_SESSION_STAT_PAGES_SENT: *value = s->pages_sent; return HLT_OK;
    case HLT_SESSION_STAT_BYTES_READ: *value = s->bytes_read; return HLT_OK;
    case HLT_SESSION_STAT_FAULTS: *value = s->faults; return HLT_OK;
    case HLT_SESSION_STAT_RESUMED: *value = s->resumed ? 1 : 0; return HLT_OK;
    case HLT_SESSION_STAT_REQUESTS: *value = s->requests; return HLT_OK;
    case HLT_SESSION_STAT_RESUMABLE: *value = s->resumable ? 1 : 0; return HLT_OK;
  }
  return Invalid("hlt_session_get_stat: unknown statistic");
}

int hlt_session_get_domain(const hlt_session* s, const char** name, const char** uuid) {
  if (!s || !name || !uuid) return Invalid("hlt_session_get_domain: NULL argument");
  if (s->kind != HLT_SESSION_LIBVIRT) return Invalid("hlt_session_get_domain: not an HLT_SESSION_LIBVIRT session");
  std::lock_guard lock(s->mu);
  if (s->domain.empty()) {
    return Code(halite::Status::NotFound("hlt_session_get_domain: libvirt has not started the domain yet"));
  }
  *name = s->domain.c_str();
  *uuid = s->uuid.c_str();
  return HLT_OK;
}

int hlt_session_next_event(hlt_session* s, int64_t timeout_ms, hlt_event_kind* kind, const char** text) {
  if (!s || !kind || !text) return Invalid("hlt_session_next_event: NULL argument");
  std::unique_lock lock(s->mu);
  auto some = [s] { return !s->events.empty(); };
  if (timeout_ms < 0) {
    s->changed.wait(lock, some);
  } else if (!s->changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), some)) {
    lock.unlock();
    return Code(halite::Status::NotFound("hlt_session_next_event: no event in " + std::to_string(timeout_ms) + " ms"));
  }
  *kind = s->events.front().first;
  s->event_text = std::move(s->events.front().second);
  s->events.pop_front();
  *text = s->event_text.c_str();
  return HLT_OK;
}

void hlt_session_destroy(hlt_session* s) {
  if (!s) return;
  bool running;
  {
    std::lock_guard lock(s->mu);
    running = s->started && !s->run_done;
  }
  // A restore still going on ends when its launched QEMU does; the C++ session kills a QEMU not detached.
  // A libvirt session's restore is waited for: its domain is libvirt's, not the session's to kill.
  if (running && s->session && s->session->process()) kill(s->session->qemu_pid(), SIGKILL);
  Join(s);
  s->session.reset();
  halite::capi::FreeLibvirtSession(s);
  delete s;
}

}  // extern "C"
