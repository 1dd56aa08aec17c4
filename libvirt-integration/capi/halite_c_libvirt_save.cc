// The C API's libvirt save (hlt_libvirt_save_create, hlt-save libvirt): libvirt::SaveLibvirtDomain with the
// options of the caller's hlt_writer (capi_save.h). Built into libhalite.so only.
#include <memory>
#include <string>
#include <utility>

#include "capi_save.h"
#include "halite/libvirt/libvirt_checkpoint.h"
#include "halite/libvirt/libvirt_connection.h"

namespace halite::capi {

Result<qemu::CheckpointSaveResult> SaveLibvirt(const std::string& connect, const std::string& domain,
                                               const std::string& path, int then, qemu::CheckpointSaveOptions options) {
  using Then = libvirt::LibvirtSaveOptions::Then;
  libvirt::LibvirtSaveOptions o;
  o.then = then == HLT_SAVE_THEN_STOP ? Then::kStop : then == HLT_SAVE_THEN_DESTROY ? Then::kDestroy : Then::kContinue;
  o.qemu = std::move(options);
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<libvirt::Connection> conn, libvirt::Connection::Open(connect));
  HLT_ASSIGN_OR_RETURN(libvirt::LibvirtSaveResult r, libvirt::SaveLibvirtDomain(*conn, domain, path, std::move(o)));
  return std::move(r.qemu);
}

}  // namespace halite::capi
