#include "halite/libvirt/libvirt_connection.h"

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <cstdlib>
#include <thread>

namespace halite::libvirt {
namespace {

// libvirt's default event loop, registered once per process and run by a thread of its own until the process
// ends (libvirt offers no way to unregister it; connections come and go, the loop stays).
Status EnsureEventLoop() {
  static const Status status = [] {
    // Errors are returned to the caller (with libvirt's message), never printed by libvirt; its log (the
    // embedded driver's start-up notes, warnings, the same errors again) is off unless the user asks for it
    // with LIBVIRT_LOG_OUTPUTS (e.g. 3:stderr).
    // (Before the first libvirt call: that one initializes libvirt and reads the environment.)
    setenv("LIBVIRT_LOG_OUTPUTS", "4:file:/dev/null", /*overwrite=*/0);
    virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});
    if (virEventRegisterDefaultImpl() < 0) return LastError("libvirt: registering the default event loop");
    std::thread([] {
      for (;;) virEventRunDefaultImpl();
    }).detach();
    return Status::Ok();
  }();
  return status;
}

}  // namespace

Status LastError(const std::string& what) {
  virErrorPtr e = virGetLastError();
  if (e == nullptr || e->code == VIR_ERR_OK) return Status::InvalidArgument(what + ": libvirt failed without a message");
  std::string message = what + ": " + (e->message ? e->message : "unknown libvirt error");
  switch (e->code) {
    case VIR_ERR_NO_DOMAIN:
      return Status::NotFound(message);
    case VIR_ERR_NO_CONNECT:
    case VIR_ERR_SYSTEM_ERROR:
    case VIR_ERR_RPC:
    case VIR_ERR_AUTH_FAILED:
    case VIR_ERR_AUTH_UNAVAILABLE:
      return Status::IoError(message);
    case VIR_ERR_NO_SUPPORT:
    case VIR_ERR_ARGUMENT_UNSUPPORTED:
      return Status::Unsupported(message);
    default:
      return Status::InvalidArgument(message);
  }
}

Domain::Domain(virDomainPtr d) : d_(d) {
  const char* n = d_ ? virDomainGetName(d_) : nullptr;
  name_ = n ? n : "";
}

Domain::~Domain() {
  if (d_ != nullptr) virDomainFree(d_);
}

Domain& Domain::operator=(Domain&& o) noexcept {
  if (this != &o) {
    if (d_ != nullptr) virDomainFree(d_);
    d_ = o.d_;
    name_ = std::move(o.name_);
    o.d_ = nullptr;
  }
  return *this;
}


Result<std::unique_ptr<Connection>> Connection::Open(const std::string& uri) {
  HLT_RETURN_IF_ERROR(EnsureEventLoop());
  std::unique_ptr<Connection> c(new Connection());
  c->conn_ = virConnectOpen(uri.empty() ? nullptr : uri.c_str());
  if (c->conn_ == nullptr) {
    Status s = LastError("libvirt: cannot connect to " + (uri.empty() ? std::string("the default URI") : uri));
    return Status::IoError(s.message());
  }
  char* actual = virConnectGetURI(c->conn_);
  c->uri_ = actual ? actual : uri;
  free(actual);
  return c;
}

Connection::~Connection() {
  if (conn_ != nullptr) virConnectClose(conn_);
}

Result<Domain> Connection::LookupDomain(const std::string& name) const {
  virDomainPtr d = virDomainLookupByName(conn_, name.c_str());
  if (d == nullptr) return LastError("libvirt (" + uri_ + "): domain '" + name + "'");
  return Domain(d);
}

bool Connection::HasDomain(const std::string& name) const {
  virDomainPtr d = virDomainLookupByName(conn_, name.c_str());
  if (d == nullptr) {
    virResetLastError();
    return false;
  }
  virDomainFree(d);
  return true;
}

}  // namespace halite::libvirt
