#include "halite/qemu/qemu_restore_record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace halite::qemu {

std::string RecordRunDir() {
  const char* env = std::getenv("HALITE_RUN_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("/run/halite/restores");
}

std::string RecordPathForPid(pid_t pid) { return RecordRunDir() + "/qemu-" + std::to_string(pid) + ".json"; }

Result<uint64_t> ProcessStartTime(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.empty()) return Status::NotFound(path + ": no such process");
  // The command name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return Status::Corrupt(path + ": no ')' after the command name");
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return Status::Corrupt(path + ": fewer than 22 fields");
    // Field 3 is the state: a zombie has exited already (only its parent has not reaped it yet).
    if (i == 3 && (field == "Z" || field == "X")) return Status::NotFound(path + ": the process has exited");
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

namespace {

Status MakeDirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string part = dir.substr(0, at);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return Status::IoError(part + ": cannot create", errno);
  }
  return Status::Ok();
}

}  // namespace

Status WriteRestoreRecord(const RestoreRecord& r, const std::string& path) {
  const nlohmann::ordered_json j = {
      {"format", "halite-restore-record/1"},
      {"checkpoint", r.checkpoint},
      {"file_id", r.file_id},
      {"qemu_pid", r.qemu_pid},
      {"qemu_start_time", r.qemu_start_time},
      {"qmp_socket", r.qmp_socket},
      {"qemu_dir", r.qemu_dir},
      {"incoming_socket", r.incoming_socket},
      {"guest_ran", r.guest_ran},
      {"qemu_binary", r.qemu_binary},
      {"qemu_args", r.qemu_args},
  };
  const std::string text = j.dump(2) + "\n";
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) HLT_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(tmp + ": cannot create", errno);
  bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
  const int write_errno = errno;
  ok = fsync(fd) == 0 && ok;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : write_errno;
    unlink(tmp.c_str());
    return Status::IoError(path + ": cannot write the restore record", e);
  }
  return Status::Ok();
}

Result<RestoreRecord> ReadRestoreRecord(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound(path + ": no restore record (no lazy restore was running there)");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != "halite-restore-record/1") {
    return Status::Corrupt(path + ": not a restore record (expected JSON with format halite-restore-record/1)");
  }
  RestoreRecord r;
  try {
    r.checkpoint = j.at("checkpoint").get<std::string>();
    r.file_id = j.at("file_id").get<std::string>();
    r.qemu_pid = j.at("qemu_pid").get<pid_t>();
    r.qemu_start_time = j.at("qemu_start_time").get<uint64_t>();
    r.qmp_socket = j.at("qmp_socket").get<std::string>();
    r.qemu_dir = j.value("qemu_dir", "");
    r.incoming_socket = j.value("incoming_socket", "");
    r.guest_ran = j.value("guest_ran", false);
    r.qemu_binary = j.value("qemu_binary", "");
    r.qemu_args = j.value("qemu_args", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    return Status::Corrupt(path + ": restore record field missing or of the wrong type: " + e.what());
  }
  if (r.qemu_pid <= 0 || r.file_id.size() != 32) {
    return Status::Corrupt(path + ": restore record with qemu_pid " + std::to_string(r.qemu_pid) + " and file_id '" +
                           r.file_id + "' (expected a pid and 32 hex digits)");
  }
  return r;
}

}  // namespace halite::qemu
