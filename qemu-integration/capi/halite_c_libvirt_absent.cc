// libhalite.so built without the libvirt integration (HALITE_WITH_LIBVIRT=OFF): HLT_SESSION_LIBVIRT is declared,
// and says it is not built.
#include "capi/capi_internal.h"
#include "capi_save.h"
#include "capi_session.h"

namespace halite::capi {

Status NewLibvirtSession(hlt_session*, const char*) {
  return Status::Unsupported("hlt_session_create: HLT_SESSION_LIBVIRT: this libhalite was built without the libvirt "
                             "integration (HALITE_WITH_LIBVIRT)");
}
void FreeLibvirtSession(hlt_session*) {}
int LibvirtSetParam(hlt_session*, hlt_session_param, int64_t) { return Invalid("HLT_SESSION_LIBVIRT: not built"); }
int LibvirtSetString(hlt_session*, hlt_session_string, const char*) {
  return Invalid("HLT_SESSION_LIBVIRT: not built");
}
Status LibvirtStart(hlt_session*) { return Status::Unsupported("HLT_SESSION_LIBVIRT: not built"); }
Result<qemu::CheckpointSaveResult> SaveLibvirt(const std::string&, const std::string&, const std::string&, int,
                                               qemu::CheckpointSaveOptions) {
  return Status::Unsupported("hlt_libvirt_save_create: this libhalite was built without the libvirt integration");
}

}  // namespace halite::capi
