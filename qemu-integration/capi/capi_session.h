// What the C API's restore sessions share across kinds (halite_c_session.cc: QEMU, and the sessions' common
// calls; libvirt-integration/capi/halite_c_libvirt_session.cc: libvirt). Built into libhalite.so only.
//
// A session's restore runs on a thread of its own (runner); the figures and events its callbacks report are kept
// under `mu` for hlt_session_get_stat and hlt_session_next_event from any thread.
#ifndef HALITE_QEMU_CAPI_CAPI_SESSION_H_
#define HALITE_QEMU_CAPI_CAPI_SESSION_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "halite/halite_c.h"
#include "halite/qemu/qemu_restore_session.h"
#include "halite/status.h"

namespace halite::capi {
struct LibvirtSessionParts;  // the options of a libvirt session (halite_c_libvirt_session.cc)
}

struct hlt_session {
  hlt_session_kind kind = HLT_SESSION_QEMU;
  halite::qemu::RestoreSessionOptions options;  // QEMU sessions
  halite::capi::LibvirtSessionParts* libvirt = nullptr;  // libvirt sessions (owned)
  hlt_open_options open;  // default: as hlt_reader_open
  std::unique_ptr<halite::qemu::RestoreSession> session;  // QEMU sessions, once started
  std::thread runner;  // the restore to its end
  bool started = false, joined = false;

  mutable std::mutex mu;
  std::condition_variable changed;
  int state = HLT_SESSION_STATE_CREATED;
  bool run_done = false;
  halite::Status run_status;
  uint64_t pid = 0, running_us = 0, done_us = 0, pages_sent = 0, bytes_read = 0, faults = 0, requests = 0;
  bool resumed = false, resumable = false;
  std::string domain, uuid;  // libvirt: the domain restored into, once libvirt started it (or the one resumed)
  std::deque<std::pair<hlt_event_kind, std::string>> events;
  std::string event_text;  // the last event handed out
};

namespace halite::capi {

// Queues an event (takes mu).
void SessionEvent(hlt_session* s, hlt_event_kind kind, std::string text);
// The guest runs: the figure, the state and the event (takes mu).
void SessionGuestRuns(hlt_session* s, uint64_t us, const char* what);
// The restore's figures as the engine and the channel report them while it goes on (takes mu).
void SessionProgress(hlt_session* s, const RestoreEngineStats& engine, const qemu::PushRestoreStats& channel);
// The restore ended with `st`: the final figures from `r`, the state and the DONE or FAILED event (takes mu).
void SessionFinished(hlt_session* s, const Status& st, const qemu::CheckpointRestoreResult& r);
// HLT_OK for 0 or 1 (into *out); HLT_EINVAL with `what` otherwise.
int SessionBool(int64_t v, bool* out, const char* what);

// The libvirt part (halite_c_libvirt_session.cc when libhalite.so is built with the libvirt integration; otherwise
// each answers that libvirt sessions are not built).
Status NewLibvirtSession(hlt_session* s, const char* checkpoint);
void FreeLibvirtSession(hlt_session* s);
int LibvirtSetParam(hlt_session* s, hlt_session_param param, int64_t value);
int LibvirtSetString(hlt_session* s, hlt_session_string option, const char* value);
// Prepares the options and starts the runner thread (mu not held).
Status LibvirtStart(hlt_session* s);

}  // namespace halite::capi

#endif  // HALITE_QEMU_CAPI_CAPI_SESSION_H_
