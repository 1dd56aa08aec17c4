/* libhalite C API, VMM part: saving and restoring QEMU and libvirt guests, and the host image server.
 *
 * STATUS (issue 25 item 2): DESIGN ONLY. Nothing declared here is built yet, and this header is not installed (the
 * restore sessions into QEMU and libvirt domains are built, and declared in halite_c.h). It
 * is committed so that the Python bindings and the restore-orchestration work can see the shape of the API. What
 * is built is in halite_c.h (libhalite.so): reader, writer, info, verify, parents, keys, block cache, s3:// and
 * rados://, lazy restore into the caller's memory, raw saves, QEMU saves (hlt_qemu_save_create) and restores into QEMU
 * and libvirt domains (hlt_session_*, HLT_SESSION_LIBVIRT), libvirt saves (hlt_libvirt_save_create).
 *
 * Where it will live: in libhalite.so too, one library (Debian package libhalite1), not a second one. The
 * integrations use the core's internals (the static libhalite.a they link exports everything), which libhalite.so
 * hides (-fvisibility=hidden, libhalite.map); a second shared library would need its own copy of the core, and
 * with it its own thread-local error (hlt_last_error) and its own idea of an hlt_writer or hlt_keyring handed
 * across. The QEMU save already works this way: the QEMU integration's objects are compiled into libhalite.so
 * with hidden visibility. The cost: libhalite1 gains libvirt0 and libxml2 (libvirt) and libfuse3-3 (the image
 * server) as Depends, found by dpkg-shlibdeps; the package list (libhalite1, libhalite-dev, halite-tools,
 * python3-halite) has no room for a second library package either.
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

/* --- saving a libvirt domain (hlt-save libvirt) ---
 * Built: halite_c.h (hlt_libvirt_save_create, hlt_save_set_string, HLT_SAVE_CONNECT). */

/* --- restore sessions ---
 * Built: halite_c.h (hlt_session_*, HLT_SESSION_QEMU and HLT_SESSION_LIBVIRT, memory shared, clone, resume,
 * status file). Left: HLT_SESSION_DETACH = 5 (--detach: a supervisor finishes the restore) and
 * HLT_EVENT_PROGRESS = 4. */

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
