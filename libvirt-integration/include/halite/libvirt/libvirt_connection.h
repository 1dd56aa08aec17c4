// A connection to libvirt's QEMU driver, through its C API: `qemu:///system`, `qemu:///session`, a remote URI,
// or the embedded driver (`qemu:///embed?root=DIR`, no daemon: the driver runs inside this process).
//
// libvirt delivers events (and, for the embedded driver, serves the QEMU monitors) from an event loop the
// application runs: the connection runs libvirt's default event loop on a thread of its own for its lifetime.
// libvirt's errors become Status values carrying libvirt's message; nothing is printed to stderr.
#ifndef HALITE_LIBVIRT_LIBVIRT_CONNECTION_H_
#define HALITE_LIBVIRT_LIBVIRT_CONNECTION_H_

#include <memory>
#include <string>

#include "halite/status.h"

// libvirt's handle types, without including libvirt.h in our headers.
typedef struct _virConnect* virConnectPtr;
typedef struct _virDomain* virDomainPtr;

namespace halite::libvirt {

// The last libvirt error of this thread as a Status: "<what>: <libvirt's message>". Domain-not-found becomes
// kNotFound; an unreachable daemon kIoError; everything else kInvalidArgument (libvirt refused the request).
Status LastError(const std::string& what);

// A domain handle, freed on destruction.
class Domain {
 public:
  Domain() = default;
  // Keeps the name: asking libvirt for it later would reset the thread's last libvirt error, which an error
  // message naming the domain must still read.
  explicit Domain(virDomainPtr d);
  ~Domain();
  Domain(Domain&& o) noexcept : d_(o.d_), name_(std::move(o.name_)) { o.d_ = nullptr; }
  Domain& operator=(Domain&& o) noexcept;
  Domain(const Domain&) = delete;
  Domain& operator=(const Domain&) = delete;
  virDomainPtr get() const { return d_; }
  explicit operator bool() const { return d_ != nullptr; }
  const std::string& name() const { return name_; }

 private:
  virDomainPtr d_ = nullptr;
  std::string name_;
};

class Connection {
 public:
  // Opens `uri` (empty: libvirt's default, LIBVIRT_DEFAULT_URI or qemu:///system for root). Errors: kIoError when
  // libvirt cannot be reached (no daemon, no permission), with the URI.
  static Result<std::unique_ptr<Connection>> Open(const std::string& uri);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  virConnectPtr get() const { return conn_; }
  const std::string& uri() const { return uri_; }

  // kNotFound naming the domain when there is none.
  Result<Domain> LookupDomain(const std::string& name) const;
  // True when a domain (running or only defined) has this name.
  bool HasDomain(const std::string& name) const;

 private:
  Connection() = default;
  virConnectPtr conn_ = nullptr;
  std::string uri_;
};

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_CONNECTION_H_
