// The C API's save handle (hlt_save), shared by the QEMU save (halite_c_qemu.cc) and the libvirt save
// (libvirt-integration/capi/halite_c_libvirt_save.cc). Built into libhalite.so only.
#ifndef HALITE_QEMU_CAPI_CAPI_SAVE_H_
#define HALITE_QEMU_CAPI_CAPI_SAVE_H_

#include <memory>
#include <string>

#include "capi/capi_internal.h"
#include "halite/halite_c.h"
#include "halite/qemu/qemu_checkpoint.h"

struct hlt_save {
  hlt_writer* writer = nullptr;  // borrowed
  std::string qmp_socket;        // QEMU saves
  bool libvirt = false;          // hlt_libvirt_save_create
  std::string domain, connect;
  int libvirt_then = HLT_SAVE_THEN_CONT;
  halite::qemu::CheckpointSaveOptions options;
  int connect_timeout_ms = 5000;
  bool ran = false;
  std::unique_ptr<halite::qemu::CheckpointSaveResult> result;  // after a successful run
};

namespace halite::capi {

// hlt-save libvirt DOMAIN -o PATH [--connect URI] --then (HLT_SAVE_THEN_CONT, _STOP, _DESTROY) with the QEMU save's
// options; kUnsupported when libhalite.so was built without the libvirt integration.
Result<qemu::CheckpointSaveResult> SaveLibvirt(const std::string& connect, const std::string& domain,
                                               const std::string& path, int then, qemu::CheckpointSaveOptions options);

}  // namespace halite::capi

#endif  // HALITE_QEMU_CAPI_CAPI_SAVE_H_
