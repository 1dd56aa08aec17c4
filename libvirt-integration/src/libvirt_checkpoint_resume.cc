// Resuming the lazy restore of a libvirt domain whose hlt-restore died (halite/libvirt/libvirt_checkpoint.h).
// The domain's QEMU was started with a private QMP socket of the restore's own (`-qmp unix:DIR.qmp.sock,...`,
// or DIR/qmp.sock before, on its command line, DIR an hlt-libvirt-* directory): that is where the recovery is driven from, as the
// restore was.
#include <libvirt/libvirt.h>
#include <unistd.h>

#include "halite/libvirt/libvirt_checkpoint.h"
#include "halite/qemu/qemu_migration_blocker.h"
#include "qemu_process_lookup.h"

namespace halite::libvirt {
namespace {

// The path of the restore's private QMP socket on QEMU's command line: "-qmp" "unix:PATH,server=on,...".
std::string PrivateQmpSocket(const std::vector<std::string>& args) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    const std::string& v = args[i + 1];
    if (args[i] != "-qmp" || v.rfind("unix:", 0) != 0) continue;
    const std::string path = v.substr(5, v.find(',') == std::string::npos ? std::string::npos : v.find(',') - 5);
    if (path.find("/hlt-libvirt-") != std::string::npos) return path;
  }
  return "";
}

}  // namespace

Status ResumeLibvirtDomain(const Connection& connection, const CheckpointReader& reader, const std::string& domain_name,
                           LibvirtResumeOptions options, LibvirtRestoreResult* result) {
  HLT_ASSIGN_OR_RETURN(Domain domain, connection.LookupDomain(domain_name));
  char uuid[VIR_UUID_STRING_BUFLEN] = {0};
  if (virDomainGetUUIDString(domain.get(), uuid) != 0) return LastError("libvirt: the UUID of domain " + domain_name);
  result->domain = domain_name;
  result->uuid = uuid;
  std::vector<std::string> args;  // the QEMU's command line, kept by the match
  HLT_ASSIGN_OR_RETURN(int pid, FindProcessByArguments(
                                    [&](const std::vector<std::string>& a) {
                                      if (!HasArgument(a, "-uuid", uuid)) return false;
                                      args = a;
                                      return true;
                                    },
                                    "the QEMU of domain " + domain_name + " (-uuid " + uuid + ")"));
  const std::string qmp_path = PrivateQmpSocket(args);
  if (qmp_path.empty()) {
    return Status::InvalidArgument("domain " + domain_name + " (QEMU pid " + std::to_string(pid) +
                                   ") was not started by hlt-restore libvirt: there is no restore to resume");
  }
  if (options.check_qemu) HLT_RETURN_IF_ERROR(options.check_qemu(pid));
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<qemu::QmpClient> qmp, qemu::QmpClient::Connect(qmp_path, 10000));
  options.qemu.resume = true;
  options.qemu.lazy = true;
  options.qemu.qemu_pid = pid;
  Status s = qemu::RestoreCheckpointIntoQemu(reader, *qmp, options.qemu, &result->qemu);
  if (!s.ok()) return s.WithContext("resuming the restore of domain " + domain_name);
  // Done as the first restore would have been: the migration blocker goes, and with it the private socket.
  HLT_RETURN_IF_ERROR(qemu::MigrationBlocker::RemoveLeftOver(*qmp));
  qmp.reset();
  unlink(qmp_path.c_str());
  RemovePrivateQmpSocketDir(qmp_path);
  return Status::Ok();
}

}  // namespace halite::libvirt
