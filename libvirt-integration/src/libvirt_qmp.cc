#include "halite/libvirt/libvirt_qmp.h"

#include "qemu_process_lookup.h"

#include <libvirt/libvirt-qemu.h>
#include <libvirt/libvirt.h>

#include <chrono>
#include <cstdlib>

namespace halite::libvirt {

using qemu::Json;
using qemu::FindMember;
using qemu::JsonText;
using qemu::ParseJson;

LibvirtQmpClient::LibvirtQmpClient(const Connection& connection, const Domain& domain, std::string name)
    : QmpClient(std::move(name)), connection_(connection), domain_(domain) {}

Result<std::unique_ptr<LibvirtQmpClient>> LibvirtQmpClient::Open(const Connection& connection,
                                                                  const Domain& domain) {
  std::unique_ptr<LibvirtQmpClient> c(
      new LibvirtQmpClient(connection, domain, "qmp (libvirt passthrough, domain " + domain.name() + ")"));
  c->callback_id_ = virConnectDomainQemuMonitorEventRegister(connection.get(), domain.get(), nullptr, &OnEvent,
                                                             c.get(), nullptr, 0);
  if (c->callback_id_ < 0) return LastError(c->name() + ": subscribing to QEMU's events");
  // What a socket client reads from the greeting.
  HLT_ASSIGN_OR_RETURN(Json version, c->Execute("query-version"));
  c->greeting_ = Json::object({{"version", version}});
  return c;
}

LibvirtQmpClient::~LibvirtQmpClient() {
  if (callback_id_ >= 0) virConnectDomainQemuMonitorEventDeregister(connection_.get(), callback_id_);
}

void LibvirtQmpClient::OnEvent(virConnectPtr, virDomainPtr, const char* event, long long seconds, unsigned int micros,
                               const char* details, void* opaque) {
  auto* self = static_cast<LibvirtQmpClient*>(opaque);
  qemu::QmpEvent ev;
  ev.name = event ? event : "";
  ev.host_time_us = seconds * 1000000 + micros;
  if (details != nullptr) {
    auto data = ParseJson(details, self->name());
    if (data) ev.data = std::move(*data);
  }
  std::lock_guard<std::mutex> lock(self->mu_);
  self->arrived_.push_back(std::move(ev));
  self->cv_.notify_all();
}

Status LibvirtQmpClient::ReadEvents(int timeout_ms, const char* waiting_for) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_ms >= 0 &&
      !cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !arrived_.empty(); })) {
    return Status::IoError(name() + ": no " + waiting_for + " within " + std::to_string(timeout_ms) + " ms")
        .set_retryable(true);
  }
  while (!arrived_.empty()) {
    QueueEvent(std::move(arrived_.front()));
    arrived_.pop_front();
  }
  return Status::Ok();
}

Result<Json> LibvirtQmpClient::ExecuteWithFd(std::string_view command, const Json& arguments, int fd, int timeout_ms) {
  // libvirt applies its own monitor timeout; a command it cannot deliver fails rather than blocks.
  (void)timeout_ms;
  Json request = Json::object({{"execute", std::string(command)}});
  if (!arguments.is_null()) request["arguments"] = arguments;
  const std::string text = JsonText(request);
  char* reply = nullptr;
  int rc;
  if (fd >= 0) {
    int files[1] = {fd};
    rc = virDomainQemuMonitorCommandWithFiles(domain_.get(), text.c_str(), 1, files, nullptr, nullptr, &reply, 0);
  } else {
    rc = virDomainQemuMonitorCommand(domain_.get(), text.c_str(), &reply, 0);
  }
  if (rc < 0) {
    Status s = LastError(name() + ": " + std::string(command));
    return Status::IoError(s.message());
  }
  std::string body = reply ? reply : "";
  free(reply);
  auto parsed = ParseJson(body, name());
  if (!parsed) return parsed.error();
  if (const Json* ret = FindMember(*parsed, "return")) return *ret;
  if (const Json* err = FindMember(*parsed, "error")) return ErrorStatus(command, *err);
  return Status::Corrupt(name() + ": reply to '" + std::string(command) + "' has neither return nor error: " +
                         body.substr(0, 200));
}

int LibvirtQmpClient::PeerPid() const {
  // A remote URI (qemu+ssh://host/system) names a host: its QEMU is not among this host's processes.
  const std::string& uri = connection_.uri();
  const size_t scheme = uri.find("://");
  if (scheme == std::string::npos || (scheme + 3 < uri.size() && uri[scheme + 3] != '/')) return -1;
  char uuid[VIR_UUID_STRING_BUFLEN] = {0};
  if (virDomainGetUUIDString(domain_.get(), uuid) != 0) return -1;
  auto pid = FindProcessByArguments(
      [&](const std::vector<std::string>& args) { return HasArgument(args, "-uuid", uuid); }, "-uuid " + std::string(uuid));
  return pid ? *pid : -1;
}

}  // namespace halite::libvirt
