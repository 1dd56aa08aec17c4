// A migration blocker for a QEMU whose memory is still coming in (qemu_migration_blocker.h).
#include "halite/qemu/qemu_migration_blocker.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>

#include "halite/qemu/qemu_img.h"

namespace halite::qemu {

Result<MigrationBlocker> MigrationBlocker::Install(QmpClient& qmp, const std::string& scratch_dir) {
  std::string path = scratch_dir + "/migration-blocker-XXXXXX";
  const int tmp = mkstemp(path.data());
  if (tmp < 0) return Status::IoError(path + ": cannot create the blocker's image", errno);
  close(tmp);
  // A 1 MiB VDI image (qemu-img writes a few KiB: header and block map).
  Status made = RunQemuImg({"create", "-q", "-f", "vdi", path, "1M"});
  const int fd = made.ok() ? open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  const int open_errno = errno;
  unlink(path.c_str());
  HLT_RETURN_IF_ERROR(made);
  if (fd < 0) return Status::IoError(path + ": cannot open the blocker's image", open_errno);
  Result<Json> added = qmp.ExecuteWithFd("add-fd", Json::object({{"opaque", kRestoreBlockerNode}}), fd);
  close(fd);
  if (!added) return added.error().WithContext("migration blocker");
  const Json* set = FindMember(*added, "fdset-id");
  if (set == nullptr || !set->is_number_integer()) return Status::Corrupt("qmp: add-fd: no fdset-id in " + JsonText(*added));
  MigrationBlocker b;
  b.fdset_ = AsInt(*set);
  Json file = Json::object({{"driver", "file"}, {"filename", "/dev/fdset/" + std::to_string(b.fdset_)}});
  Result<Json> node = qmp.Execute(
      "blockdev-add", Json::object({{"driver", "vdi"}, {"node-name", kRestoreBlockerNode}, {"read-only", true},
                                 {"file", file}}));
  if (!node) {
    (void)qmp.Execute("remove-fd", Json::object({{"fdset-id", b.fdset_}}));
    return node.error().WithContext("migration blocker");
  }
  b.qmp_ = &qmp;
  return b;
}

MigrationBlocker::MigrationBlocker(MigrationBlocker&& o) noexcept : qmp_(o.qmp_), fdset_(o.fdset_) {
  o.qmp_ = nullptr;
}

MigrationBlocker& MigrationBlocker::operator=(MigrationBlocker&& o) noexcept {
  if (this != &o) {
    (void)Remove();
    qmp_ = o.qmp_;
    fdset_ = o.fdset_;
    o.qmp_ = nullptr;
  }
  return *this;
}

MigrationBlocker::~MigrationBlocker() { (void)Remove(); }

Status MigrationBlocker::Remove() {
  if (qmp_ == nullptr) return Status::Ok();
  QmpClient* qmp = qmp_;
  qmp_ = nullptr;
  Result<Json> del = qmp->Execute("blockdev-del", Json::object({{"node-name", kRestoreBlockerNode}}));
  // The set frees itself once its last descriptor is closed and it is marked removed.
  Result<Json> fd = qmp->Execute("remove-fd", Json::object({{"fdset-id", fdset_}}));
  if (!del) return del.error().WithContext("removing the migration blocker");
  if (!fd) return fd.error().WithContext("removing the migration blocker's descriptor set");
  return Status::Ok();
}

Status MigrationBlocker::RemoveLeftOver(QmpClient& qmp) {
  // The node, if it is there (a restore that died may not have got as far as adding it)...
  Result<Json> del = qmp.Execute("blockdev-del", Json::object({{"node-name", kRestoreBlockerNode}}));
  if (!del && del.error().message().find(kRestoreBlockerNode) == std::string::npos) {
    return del.error().WithContext("removing the migration blocker");
  }
  // ... and its descriptor set, found by the opaque string Install gave it.
  HLT_ASSIGN_OR_RETURN(Json sets, qmp.Execute("query-fdsets"));
  if (!sets.is_array()) return Status::Ok();
  for (const Json& set : sets) {
    const Json* id = FindMember(set, "fdset-id");
    const Json* fds = FindMember(set, "fds");
    if (id == nullptr || fds == nullptr || !fds->is_array()) continue;
    bool ours = false;
    for (const Json& fd : *fds) {
      const Json* opaque = FindMember(fd, "opaque");
      ours = ours || (opaque != nullptr && AsString(*opaque) == kRestoreBlockerNode);
    }
    if (ours) (void)qmp.Execute("remove-fd", Json::object({{"fdset-id", AsInt(*id)}}));
  }
  return Status::Ok();
}

}  // namespace halite::qemu
