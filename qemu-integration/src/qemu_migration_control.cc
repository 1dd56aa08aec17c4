#include "halite/qemu/qemu_migration_control.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;

Result<std::pair<UniqueFd, UniqueFd>> SocketPair() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return Status::IoError("socketpair", errno);
  return std::make_pair(UniqueFd(sv[0]), UniqueFd(sv[1]));
}

// "4 KiB" -> 4096
bool ParseSize(const std::string& num, const std::string& unit, uint64_t* out) {
  char* end = nullptr;
  const double v = strtod(num.c_str(), &end);
  if (end == num.c_str()) return false;
  uint64_t mul = 1;
  if (unit == "KiB") mul = 1ull << 10;
  else if (unit == "MiB") mul = 1ull << 20;
  else if (unit == "GiB") mul = 1ull << 30;
  else if (unit == "B" || unit.empty()) mul = 1;
  else return false;
  *out = static_cast<uint64_t>(v * static_cast<double>(mul));
  return true;
}

}  // namespace

Status SetMigrationCapabilities(QmpClient& qmp, const std::vector<std::pair<std::string, bool>>& caps) {
  Json list = Json::array();
  for (const auto& [name, on] : caps) list.push_back(Json::object({{"capability", name}, {"state", on}}));
  auto r = qmp.Execute("migrate-set-capabilities", Json::object({{"capabilities", list}}));
  return r.status();
}

static Result<UniqueFd> ListenOverFd(QmpClient& qmp, const std::string& command, const std::string& fd_name) {
  HLT_ASSIGN_OR_RETURN(auto pair, SocketPair());
  HLT_ASSIGN_OR_RETURN(Json ignored, qmp.ExecuteWithFd("getfd", Json::object({{"fdname", fd_name}}), pair.second.get()));
  (void)ignored;
  pair.second.reset();  // QEMU holds its own copy now; ours would keep the channel open after QEMU closes it
  HLT_ASSIGN_OR_RETURN(Json ignored2, qmp.Execute(command, Json::object({{"uri", "fd:" + fd_name}})));
  (void)ignored2;
  return std::move(pair.first);
}

static Result<UniqueFd> ListenOverUnix(QmpClient& qmp, const std::string& command, const std::string& socket_path,
                                int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) return Status::InvalidArgument("socket path too long: " + socket_path);
  memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  HLT_ASSIGN_OR_RETURN(Json ignored, qmp.Execute(command, Json::object({{"uri", "unix:" + socket_path}})));
  (void)ignored;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Status::IoError("socket", errno);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    const int e = errno;
    if ((e != ENOENT && e != ECONNREFUSED) || Clock::now() > deadline) {
      return Status::IoError("connect to QEMU's incoming socket " + socket_path, e);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<UniqueFd> StartIncomingOverFd(QmpClient& qmp, const std::string& fd_name) {
  return ListenOverFd(qmp, "migrate-incoming", fd_name);
}

Result<UniqueFd> StartIncomingOverUnix(QmpClient& qmp, const std::string& socket_path, int timeout_ms) {
  return ListenOverUnix(qmp, "migrate-incoming", socket_path, timeout_ms);
}

Result<UniqueFd> StartRecoveryOverFd(QmpClient& qmp, const std::string& fd_name) {
  return ListenOverFd(qmp, "migrate-recover", fd_name);
}

Result<UniqueFd> StartRecoveryOverUnix(QmpClient& qmp, const std::string& socket_path, int timeout_ms) {
  return ListenOverUnix(qmp, "migrate-recover", socket_path, timeout_ms);
}

Result<UniqueFd> StartMigrationToFd(QmpClient& qmp, const std::string& fd_name,
                                    const std::function<Status()>& before_migrate) {
  HLT_ASSIGN_OR_RETURN(auto pair, SocketPair());
  // QEMU's side may queue up to 16 MiB: a reader that stalls for a moment (its staging file's writeback) does not
  // stall QEMU's migration thread, which in a live save also serves the guest's write-protect faults. Root may
  // exceed net.core.wmem_max (FORCE); otherwise the kernel caps it. Best effort.
  const int queue = 16 << 20;
  if (setsockopt(pair.second.get(), SOL_SOCKET, SO_SNDBUFFORCE, &queue, sizeof queue) != 0) {
    (void)setsockopt(pair.second.get(), SOL_SOCKET, SO_SNDBUF, &queue, sizeof queue);
  }
  HLT_ASSIGN_OR_RETURN(Json ignored, qmp.ExecuteWithFd("getfd", Json::object({{"fdname", fd_name}}), pair.second.get()));
  (void)ignored;
  pair.second.reset();  // so that we see end-of-stream when QEMU closes its copy
  if (before_migrate) {
    if (Status s = before_migrate(); !s.ok()) {
      (void)qmp.Execute("closefd", Json::object({{"fdname", fd_name}}));
      return s;
    }
  }
  HLT_ASSIGN_OR_RETURN(Json ignored2, qmp.Execute("migrate", Json::object({{"uri", "fd:" + fd_name}})));
  (void)ignored2;
  return std::move(pair.first);
}

Result<std::vector<RamBlockInfo>> QueryRamBlocks(QmpClient& qmp) {
  HLT_ASSIGN_OR_RETURN(std::string text, qmp.HumanMonitorCommand("info ramblock"));
  // Columns: Block Name, PSize (number + unit), Offset, Used, Total[, HVA, RO]. Names contain no spaces.
  std::vector<RamBlockInfo> out;
  std::istringstream lines(text);
  std::string line;
  bool header = true;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::vector<std::string> tok;
    for (std::string t; f >> t;) tok.push_back(t);
    if (tok.empty()) continue;
    if (header) {
      if (tok[0] != "Block") return Status::Corrupt("info ramblock: unexpected header line: " + line);
      header = false;
      continue;
    }
    if (tok.size() < 6) return Status::Corrupt("info ramblock: short line: " + line);
    RamBlockInfo b;
    b.name = tok[0];
    if (!ParseSize(tok[1], tok[2], &b.page_size)) return Status::Corrupt("info ramblock: bad page size in: " + line);
    b.used_length = strtoull(tok[4].c_str(), nullptr, 16);
    b.max_length = strtoull(tok[5].c_str(), nullptr, 16);
    out.push_back(std::move(b));
  }
  if (out.empty()) return Status::Corrupt("info ramblock: no RAMBlocks in: " + text.substr(0, 200));
  return out;
}

Result<MigrationStatus> QueryMigration(QmpClient& qmp) {
  HLT_ASSIGN_OR_RETURN(Json r, qmp.Execute("query-migrate"));
  MigrationStatus s;
  if (const Json* st = FindMember(r, "status")) s.status = AsString(*st);
  if (s.status.empty()) s.status = "none";
  if (const Json* e = FindMember(r, "error-desc")) s.error_desc = AsString(*e);
  s.raw = std::move(r);
  return s;
}

Result<MigrationStatus> WaitForMigrationStatus(QmpClient& qmp, const std::vector<std::string>& wanted, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string last;
  for (;;) {
    HLT_ASSIGN_OR_RETURN(MigrationStatus s, QueryMigration(qmp));
    for (const auto& w : wanted) {
      if (s.status == w) return s;
    }
    if (s.status == "failed" || s.status == "cancelled") {
      return Status::Aborted("QEMU reports migration " + s.status +
                             (s.error_desc.empty() ? std::string() : ": " + s.error_desc));
    }
    last = s.status;
    if (Clock::now() > deadline) {
      return Status::IoError("migration status still '" + last + "' after " + std::to_string(timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<std::string> ReadGuestMemory(QmpClient& qmp, uint64_t addr, uint64_t size, const std::string& dir) {
  const std::string path = dir + "/pmemsave-" + std::to_string(getpid()) + "-" + std::to_string(addr) + ".bin";
  HLT_ASSIGN_OR_RETURN(Json ignored,
                       qmp.Execute("pmemsave", Json::object({{"val", addr}, {"size", size}, {"filename", path}}), 120000));
  (void)ignored;
  std::ifstream f(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  unlink(path.c_str());
  if (data.size() != size) {
    return Status::IoError("pmemsave wrote " + std::to_string(data.size()) + " bytes, expected " + std::to_string(size));
  }
  return data;
}

Status ExplainMigrationFailure(const Status& s, QmpClient& qmp, QemuProcess* process) {
  if (process != nullptr) {
    (void)process->Wait(500);  // QEMU exits right after a failed load; let its stderr complete
    if (!process->Alive()) return s.WithContext(process->Describe());
  }
  auto m = QueryMigration(qmp);
  std::string ctx;
  if (m.has_value()) {
    ctx = "QEMU's migration status is " + m->status;
    if (!m->error_desc.empty()) ctx += " (" + m->error_desc + ")";
    if (m->status == "postcopy-paused") ctx += ": the guest waits for its missing pages, QEMU stays up";
  } else {
    ctx = "QEMU's monitor does not answer (" + m.error().message() + ")";
  }
  if (process != nullptr) {
    const std::string tail = process->StderrTail(512);
    if (!tail.empty()) ctx += "; its stderr: " + tail;
  }
  return Status(s.code(), s.message() + " [" + ctx + "]", s.sys_errno());
}

}  // namespace halite::qemu
