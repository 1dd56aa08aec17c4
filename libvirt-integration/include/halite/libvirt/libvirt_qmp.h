// QMP through libvirt's monitor passthrough (libvirt-qemu.h): the QEMU integration's QmpClient for a domain
// libvirt started, whose monitor libvirt owns.
//
// Why passthrough for saving: a running domain has exactly one QMP monitor, libvirt's, and QEMU cannot add
// another at run time, so a save of a domain someone else started must go through libvirt. Commands go with
// virDomainQemuMonitorCommand (WithFiles for getfd: the migration channel's descriptor rides along); events come
// from virConnectDomainQemuMonitorEventRegister on the connection's event loop. libvirt marks the domain tainted
// ("custom-monitor"), which is only a note in its log. A restore instead gives the QEMU it starts a private QMP
// socket (libvirt_checkpoint.h), because it needs to talk to QEMU before libvirt would let anyone.
#ifndef HALITE_LIBVIRT_LIBVIRT_QMP_H_
#define HALITE_LIBVIRT_LIBVIRT_QMP_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "halite/libvirt/libvirt_connection.h"
#include "halite/qemu/qemu_qmp_client.h"

namespace halite::libvirt {

class LibvirtQmpClient final : public qemu::QmpClient {
 public:
  // Borrows `connection` and `domain` (both must outlive the client). Subscribes to the domain's QEMU events.
  static Result<std::unique_ptr<LibvirtQmpClient>> Open(const Connection& connection, const Domain& domain);
  ~LibvirtQmpClient() override;

  Result<qemu::Json> ExecuteWithFd(std::string_view command, const qemu::Json& arguments, int fd,
                                   int timeout_ms) override;
  // The domain's QEMU on this host, found by `-uuid UUID` on its command line; -1 for a remote connection or
  // when none is found.
  int PeerPid() const override;

 protected:
  Status ReadEvents(int timeout_ms, const char* waiting_for) override;

 private:
  LibvirtQmpClient(const Connection& connection, const Domain& domain, std::string name);
  static void OnEvent(virConnectPtr, virDomainPtr, const char* event, long long seconds, unsigned int micros,
                      const char* details, void* opaque);

  const Connection& connection_;
  const Domain& domain_;
  int callback_id_ = -1;
  // Filled on the event-loop thread, drained by ReadEvents.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<qemu::QmpEvent> arrived_;
};

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_QMP_H_
