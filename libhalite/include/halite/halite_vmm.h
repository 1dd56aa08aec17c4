/* libhalite C API, VMM part: saving and restoring QEMU and libvirt guests, and the host image server.
 *
 * STATUS (issue 25 item 2): DESIGN ONLY. Nothing declared here is built yet: the library that will carry it,
 * libhalite-vmm.so.1, is not in the tree, and this header is not installed. It is committed so that the Python
 * bindings and the restore-orchestration work can see the shape of the API. The core C API (halite_c.h, in
 * libhalite.so) is built and tested.
 *
 * Where it lives: the QEMU, libvirt and image-server parts need libvirt0, libxml2 and libfuse3. libhalite.so keeps
 * the core (reader, writer, info, verify, parents, keys, block cache, s3:// and rados://, lazy restore into the
 * caller's memory, raw save); libhalite-vmm.so.1 (Debian package libhalite-vmm1) carries hlt_qemu_*, hlt_libvirt_*,
 * hlt_session_* and hlt_server_*, links libhalite.so.1 and the integrations, and shares its handle types
 * (hlt_writer, hlt_keyring, hlt_open_options) and error reporting (hlt_last_error) with it.
 *
 * Same conventions as halite_c.h: opaque handles, 0 or a negative HLT_E* code, options by enum setters (no public
 * structs), hlt_last_error() the message the tools print after "hlt-save qemu: " and the like. */
#ifndef HALITE_HALITE_VMM_H_
#define HALITE_HALITE_VMM_H_

#include <stddef.h>
#include <stdint.h>

#include "halite/export.h"
#include "halite/halite_c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- saving a running guest (hlt-save qemu, hlt-save libvirt) ---
 * `writer` is a writer made by hlt_writer_create for the output (its options and keys apply; no region added yet);
 * the save adds the regions, pages, hints and the device state blob, commits it, and leaves it for
 * hlt_writer_get_stat and hlt_writer_free. */
typedef struct hlt_save hlt_save;
typedef enum hlt_save_param {
  HLT_SAVE_LIVE = 1,        /* --live: background snapshot, the guest keeps running; default 0 */
  HLT_SAVE_THEN = 2,        /* --then: 0 cont (default), 1 stop, 2 quit */
  HLT_SAVE_VA_WALK = 3,     /* 0 = --no-va; default 1 */
  HLT_SAVE_TIMEOUT_MS = 4   /* connecting to QMP or libvirt; default 5000 */
} hlt_save_param;
typedef enum hlt_save_string {
  HLT_SAVE_QMP_SOCKET = 1,  /* hlt_qemu: QEMU's QMP unix socket */
  HLT_SAVE_DOMAIN = 2,      /* hlt_libvirt: the domain's name */
  HLT_SAVE_CONNECT = 3      /* hlt_libvirt: the connect URI (default: libvirt's) */
} hlt_save_string;
HALITE_EXPORT int hlt_qemu_save_create(hlt_writer* writer, hlt_save** out);
HALITE_EXPORT int hlt_libvirt_save_create(hlt_writer* writer, hlt_save** out);
HALITE_EXPORT int hlt_save_set_param(hlt_save* s, hlt_save_param param, int64_t value);
HALITE_EXPORT int hlt_save_set_string(hlt_save* s, hlt_save_string option, const char* value);
/* Saves; blocks until the checkpoint is committed. */
HALITE_EXPORT int hlt_save_run(hlt_save* s);
HALITE_EXPORT void hlt_save_free(hlt_save* s);

/* --- restore sessions (hlt-restore qemu, hlt-restore libvirt) ---
 * Built on the integrations' restore sessions (halite::qemu::RestoreSession, the libvirt one). A session is set up
 * by setters, started (the guest runs when hlt_session_start returns for a lazy restore), then waited for,
 * detached from (the guest outlives the process) or destroyed. Thread-safety: hlt_session_get_stat and
 * hlt_session_next_event from any thread; everything else from one controlling thread. */
typedef struct hlt_session hlt_session;
typedef enum hlt_session_kind { HLT_SESSION_QEMU = 1, HLT_SESSION_LIBVIRT = 2 } hlt_session_kind;
typedef enum hlt_session_param {
  HLT_SESSION_EAGER = 1,         /* 1 = --eager: every page before the guest runs; default 0 (lazy) */
  HLT_SESSION_MEMORY_SHARED = 2, /* 1 = --memory shared: guest RAM mapped from the host image server */
  HLT_SESSION_CLONE = 3,         /* libvirt: 1 = --clone: a new domain (name HLT_SESSION_CLONE_NAME) */
  HLT_SESSION_RESUME = 4,        /* 1 = --resume: take over a restore whose restorer died */
  HLT_SESSION_DETACH = 5,        /* 1 = --detach: a supervisor finishes the restore; start returns when it runs */
  HLT_SESSION_LOADER_RATE = 6,   /* bytes per second of the background loader; 0 unlimited */
  HLT_SESSION_START_PAUSED = 7   /* 1: the guest stays paused after restore */
} hlt_session_param;
typedef enum hlt_session_string {
  HLT_SESSION_CONNECT = 1,       /* libvirt connect URI */
  HLT_SESSION_CLONE_NAME = 2,
  HLT_SESSION_QMP_SOCKET = 3,    /* qemu attach mode */
  HLT_SESSION_QEMU_BINARY = 4,   /* qemu launch mode */
  HLT_SESSION_QEMU_DIR = 5,      /* qemu launch mode: QMP socket, logs and the resume record */
  HLT_SESSION_IMAGE_DIR = 6,     /* memory shared: where the image server exports; default /run/halite/images */
  HLT_SESSION_STATUS_FILE = 7
} hlt_session_string;
typedef enum hlt_session_stat {
  HLT_SESSION_STAT_STATE = 1,          /* HLT_SESSION_STATE_* */
  HLT_SESSION_STAT_QEMU_PID = 2,
  HLT_SESSION_STAT_RUNNING_US = 3,     /* start to guest running, microseconds */
  HLT_SESSION_STAT_DONE_US = 4,        /* start to every page in */
  HLT_SESSION_STAT_PAGES_SENT = 5,
  HLT_SESSION_STAT_BYTES_READ = 6,
  HLT_SESSION_STAT_FAULTS = 7,         /* pages the guest asked for before they came */
  HLT_SESSION_STAT_RESUMED = 8         /* 1: this session took over an interrupted restore */
} hlt_session_stat;
enum {
  HLT_SESSION_STATE_CREATED = 0, HLT_SESSION_STATE_STARTING = 1, HLT_SESSION_STATE_RUNNING = 2,
  HLT_SESSION_STATE_DONE = 3, HLT_SESSION_STATE_FAILED = 4, HLT_SESSION_STATE_DETACHED = 5
};
typedef enum hlt_event_kind {
  HLT_EVENT_NOTICE = 1, HLT_EVENT_WARNING = 2, HLT_EVENT_RUNNING = 3, HLT_EVENT_PROGRESS = 4, HLT_EVENT_DONE = 5,
  HLT_EVENT_FAILED = 6
} hlt_event_kind;
HALITE_EXPORT int hlt_session_create(hlt_session_kind kind, const char* checkpoint, hlt_session** out);
HALITE_EXPORT int hlt_session_set_param(hlt_session* s, hlt_session_param param, int64_t value);
HALITE_EXPORT int hlt_session_set_string(hlt_session* s, hlt_session_string option, const char* value);
/* QEMU launch mode: appends one argument of the QEMU command line. */
HALITE_EXPORT int hlt_session_add_qemu_arg(hlt_session* s, const char* arg);
HALITE_EXPORT int hlt_session_set_open_options(hlt_session* s, const hlt_open_options* options);
HALITE_EXPORT int hlt_session_start(hlt_session* s);
/* Waits up to timeout_ms (-1: no limit) for every page; HLT_EABORTED on timeout. */
HALITE_EXPORT int hlt_session_wait(hlt_session* s, int64_t timeout_ms);
HALITE_EXPORT int hlt_session_detach(hlt_session* s);
HALITE_EXPORT int hlt_session_get_stat(const hlt_session* s, hlt_session_stat stat, uint64_t* value);
/* The next event (waits up to timeout_ms; HLT_ENOTFOUND when none came): *text valid until the next call. */
HALITE_EXPORT int hlt_session_next_event(hlt_session* s, int64_t timeout_ms, hlt_event_kind* kind, const char** text);
HALITE_EXPORT void hlt_session_destroy(hlt_session* s);

/* --- the host image server (hlt-restore serve) --- */
typedef struct hlt_server hlt_server;
HALITE_EXPORT int hlt_server_create(const char* mount_dir, hlt_server** out);
HALITE_EXPORT int hlt_server_set_open_options(hlt_server* srv, const hlt_open_options* options);
HALITE_EXPORT int hlt_server_add_checkpoint(hlt_server* srv, const char* checkpoint);
/* Mounts and serves from a thread of its own; returns when the images can be mapped. */
HALITE_EXPORT int hlt_server_start(hlt_server* srv);
/* The image file of checkpoint i (owned by the server). */
HALITE_EXPORT int hlt_server_image_path(const hlt_server* srv, uint32_t i, const char** path);
HALITE_EXPORT void hlt_server_destroy(hlt_server* srv);

#ifdef __cplusplus
}
#endif

#endif /* HALITE_HALITE_VMM_H_ */
