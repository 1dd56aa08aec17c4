// The status file a broker polls for a libvirt restore (--status-file, and always with --detach): one JSON object
// {"state", "domain", "uuid", "pid", and "error" when failed or "note"}, written to a temporary name, synced and
// renamed, so a reader never sees half of it. States: starting, running, resuming, completed, failed.
#ifndef HALITE_LIBVIRT_RESTORE_STATUS_FILE_H_
#define HALITE_LIBVIRT_RESTORE_STATUS_FILE_H_

#include <string>

namespace halite::libvirt {

class StatusFile {
 public:
  struct Contents {
    std::string state, domain, uuid;
  };

  explicit StatusFile(std::string path) : path_(std::move(path)) {}
  // `detail` goes under "error" for the state "failed", under "note" otherwise. Nothing when the path is empty.
  void Write(const std::string& state, const std::string& detail = "") const;
  void SetDomain(const std::string& name, const std::string& uuid) {
    domain_ = name;
    uuid_ = uuid;
  }
  // What the file says now; empty fields when it is missing or not JSON.
  static Contents Read(const std::string& path);

 private:
  std::string path_, domain_, uuid_;
};

// Where a detached or supervised restore's status file goes when none is named: CKPT.NAME.status, or
// CKPT.restore.status without a name.
std::string DefaultStatusPath(const std::string& checkpoint, const std::string& name);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_RESTORE_STATUS_FILE_H_
