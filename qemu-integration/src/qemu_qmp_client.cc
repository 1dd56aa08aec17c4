#include "halite/qemu/qemu_qmp_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// QMP over a monitor socket of our own.
class SocketQmpClient final : public QmpClient {
 public:
  SocketQmpClient(int fd, std::string name) : QmpClient(std::move(name)), fd_(fd) {}
  ~SocketQmpClient() override {
    if (fd_ >= 0) close(fd_);
  }
  Status Handshake(int timeout_ms);
  Result<Json> ExecuteWithFd(std::string_view command, const Json& arguments, int fd, int timeout_ms) override;
  int PeerPid() const override {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0) return -1;
    return cred.pid;
  }

 protected:
  Status ReadEvents(int timeout_ms, const char* waiting_for) override;

 private:
  Status Send(const std::string& text, int pass_fd, int timeout_ms);
  // Reads until one complete message is framed, or the deadline passes (timeout_ms < 0: no wait at all,
  // returns a null Json when nothing is complete).
  Result<Json> ReadMessage(int timeout_ms, const char* waiting_for);

  int fd_;
  JsonFramer framer_;
  int64_t next_id_ = 1;
};

}  // namespace

Result<std::unique_ptr<QmpClient>> QmpClient::Connect(const std::string& socket_path, int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("qmp: socket path too long (" + std::to_string(socket_path.size()) +
                                   " bytes, at most " + std::to_string(sizeof(addr.sun_path) - 1) + "): " + socket_path);
  }
  memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::IoError("qmp: socket", errno);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      return Adopt(fd, "qmp " + socket_path, RemainingMs(deadline) + 1000);
    }
    const int err = errno;
    close(fd);
    // ENOENT/ECONNREFUSED: QEMU has not created or is not yet listening on the socket.
    if ((err != ENOENT && err != ECONNREFUSED && err != EAGAIN) || Clock::now() >= deadline) {
      return Status::IoError("qmp: connect " + socket_path + " (waited " + std::to_string(timeout_ms) + " ms)", err);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<std::unique_ptr<QmpClient>> QmpClient::Adopt(int fd, std::string name, int timeout_ms) {
  auto c = std::make_unique<SocketQmpClient>(fd, std::move(name));
  HLT_RETURN_IF_ERROR(c->Handshake(timeout_ms));
  return std::unique_ptr<QmpClient>(std::move(c));
}

Status SocketQmpClient::Handshake(int timeout_ms) {
  HLT_ASSIGN_OR_RETURN(Json greeting, ReadMessage(timeout_ms, "the QMP greeting"));
  const Json* qmp = FindMember(greeting, "QMP");
  if (qmp == nullptr) {
    return Status::Corrupt(name_ + ": expected a greeting with a \"QMP\" member, got " + JsonText(greeting));
  }
  greeting_ = *qmp;
  HLT_ASSIGN_OR_RETURN(Json ignored, Execute("qmp_capabilities", Json(), timeout_ms));
  (void)ignored;
  return Status::Ok();
}

Status SocketQmpClient::Send(const std::string& text, int pass_fd, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t off = 0;
  bool fd_sent = pass_fd < 0;
  while (off < text.size()) {
    pollfd pfd{fd_, POLLOUT, 0};
    const int pr = poll(&pfd, 1, RemainingMs(deadline));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return Status::IoError(name_ + ": poll", errno);
    if (pr == 0) return Status::IoError(name_ + ": QEMU is not reading its monitor (send timed out)");
    iovec iov{const_cast<char*>(text.data() + off), text.size() - off};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (!fd_sent) {
      // The descriptor rides on the first byte of the command, as QEMU's monitor expects.
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
    }
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::IoError(name_ + ": send", errno);
    }
    fd_sent = true;
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<Json> SocketQmpClient::ReadMessage(int timeout_ms, const char* waiting_for) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    std::string text;
    HLT_ASSIGN_OR_RETURN(bool have, framer_.Next(&text));
    if (have) {
      auto parsed = ParseJson(text, name_);
      if (!parsed.has_value()) return parsed.error();
      if (!parsed->is_object()) return Status::Corrupt(name_ + ": message is not an object: " + text.substr(0, 200));
      return std::move(parsed).value();
    }
    if (framer_.buffered() > (64u << 20)) return Status::Corrupt(name_ + ": message longer than 64 MiB");
    const int wait = timeout_ms < 0 ? 0 : RemainingMs(deadline);
    pollfd pfd{fd_, POLLIN, 0};
    const int pr = poll(&pfd, 1, wait);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return Status::IoError(name_ + ": poll", errno);
    if (pr == 0) {
      if (timeout_ms < 0) return Json();
      return Status::IoError(name_ + ": no answer within " + std::to_string(timeout_ms) + " ms while waiting for " +
                             waiting_for)
          .set_retryable(true);
    }
    char buf[65536];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::IoError(name_ + ": read while waiting for " + waiting_for, errno);
    }
    if (n == 0) return Status::IoError(name_ + ": connection closed by QEMU while waiting for " + std::string(waiting_for));
    framer_.Feed(std::string_view(buf, static_cast<size_t>(n)));
  }
}

QmpEvent QmpClient::EventOf(const Json& msg) {
  QmpEvent ev;
  ev.name = AsString(*FindMember(msg, "event"));
  if (const Json* d = FindMember(msg, "data")) ev.data = *d;
  ev.host_time_us = 0;
  if (const Json* ts = FindMember(msg, "timestamp")) {
    const Json* s = FindMember(*ts, "seconds");
    const Json* us = FindMember(*ts, "microseconds");
    if (s && us) ev.host_time_us = AsInt(*s) * 1000000 + AsInt(*us);
  }
  return ev;
}

Status QmpClient::ErrorStatus(std::string_view command, const Json& err) const {
  const Json* cls = FindMember(err, "class");
  const Json* desc = FindMember(err, "desc");
  const std::string cls_s = cls && cls->is_string() ? AsString(*cls) : "Error";
  std::string message = name_ + ": " + std::string(command) + ": " + cls_s + ": " +
                        (desc && desc->is_string() ? AsString(*desc) : "");
  if (cls_s == "CommandNotFound") return Status::Unsupported(std::move(message));
  return Status::InvalidArgument(std::move(message));
}

Result<Json> SocketQmpClient::ExecuteWithFd(std::string_view command, const Json& arguments, int fd, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const int64_t id = next_id_++;
  Json req = Json::object({{"execute", std::string(command)}});
  if (!arguments.is_null()) req["arguments"] = arguments;
  req["id"] = id;
  std::string text = JsonText(req);
  text.push_back('\n');
  HLT_RETURN_IF_ERROR(Send(text, fd, timeout_ms));
  const std::string waiting_for = "the reply to '" + std::string(command) + "'";
  for (;;) {
    HLT_ASSIGN_OR_RETURN(Json msg, ReadMessage(RemainingMs(deadline), waiting_for.c_str()));
    if (const Json* ev = FindMember(msg, "event"); ev != nullptr && ev->is_string()) {
      QueueEvent(EventOf(msg));
      continue;
    }
    const Json* mid = FindMember(msg, "id");
    // A reply without an id answers a request QEMU could not even parse, i.e. this one.
    if (mid != nullptr && !(mid->is_number_integer() && AsInt(*mid) == id)) continue;  // a late reply to a timed-out call
    if (const Json* ret = FindMember(msg, "return")) return *ret;
    if (const Json* err = FindMember(msg, "error")) return ErrorStatus(command, *err);
    return Status::Corrupt(name_ + ": reply to '" + std::string(command) + "' has neither return nor error: " +
                           JsonText(msg).substr(0, 200));
  }
}

Result<std::string> QmpClient::HumanMonitorCommand(std::string_view command_line, int timeout_ms) {
  HLT_ASSIGN_OR_RETURN(Json r, Execute("human-monitor-command",
                                       Json::object({{"command-line", std::string(command_line)}}), timeout_ms));
  if (!r.is_string()) return Status::Corrupt(name_ + ": human-monitor-command returned a non-string");
  return AsString(r);
}

Status SocketQmpClient::ReadEvents(int timeout_ms, const char* waiting_for) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    HLT_ASSIGN_OR_RETURN(Json msg, ReadMessage(timeout_ms < 0 ? -1 : RemainingMs(deadline), waiting_for));
    if (msg.is_null()) return Status::Ok();  // timeout_ms < 0 and nothing more
    if (const Json* ev = FindMember(msg, "event"); ev != nullptr && ev->is_string()) {
      QueueEvent(EventOf(msg));
      if (timeout_ms >= 0) return Status::Ok();
    }
  }
}

Result<QmpEvent> QmpClient::WaitForEvent(std::string_view name, int timeout_ms,
                                         const std::function<bool(const Json&)>& match) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t checked = 0;
  for (;;) {
    for (; checked < events_.size(); ++checked) {
      if (events_[checked].name == name && (!match || match(events_[checked].data))) {
        QmpEvent ev = std::move(events_[checked]);
        events_.erase(events_.begin() + static_cast<std::ptrdiff_t>(checked));
        return ev;
      }
    }
    const std::string waiting_for = "event " + std::string(name);
    HLT_RETURN_IF_ERROR(ReadEvents(RemainingMs(deadline), waiting_for.c_str()));
  }
}

Result<std::vector<QmpEvent>> QmpClient::TakeEvents() {
  HLT_RETURN_IF_ERROR(ReadEvents(-1, "events"));
  std::vector<QmpEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

}  // namespace halite::qemu
