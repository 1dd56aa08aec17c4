#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "halite/qemu/qemu_qmp_client.h"

namespace halite::qemu {
namespace {

// A scripted fake QEMU monitor on one end of a socketpair.
class FakeQemu {
 public:
  using Handler = std::function<void(FakeQemu&, const Json& request)>;
  explicit FakeQemu(Handler handler) : handler_(std::move(handler)) {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    client_fd_ = sv[0];
    fd_ = sv[1];
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeQemu() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  int client_fd() const { return client_fd_; }
  void SendRaw(const std::string& s) { (void)!send(fd_, s.data(), s.size(), MSG_NOSIGNAL); }
  void Reply(const Json& req, const Json& ret) {
    Json r = Json::object({{"return", ret}});
    if (const Json* id = FindMember(req, "id")) r["id"] = *id;
    SendRaw(JsonText(r) + "\r\n");
  }
  void Close() {
    closed_ = true;
    shutdown(fd_, SHUT_RDWR);
  }
  int received_fd = -1;

 private:
  void Serve() {
    SendRaw(R"({"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}}, "capabilities": ["oob"]}})" "\r\n");
    JsonFramer framer;
    for (;;) {
      char buf[4096];
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
      iovec iov{buf, sizeof(buf)};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      const ssize_t n = recvmsg(fd_, &msg, 0);
      if (n <= 0) return;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_type == SCM_RIGHTS) memcpy(&received_fd, CMSG_DATA(c), sizeof(int));
      }
      framer.Feed(std::string_view(buf, static_cast<size_t>(n)));
      std::string text;
      while (!closed_ && *framer.Next(&text)) {
        Json req = *ParseJson(text);
        if (AsString(*FindMember(req, "execute")) == "qmp_capabilities") {
          Reply(req, Json::object());
        } else {
          handler_(*this, req);
        }
      }
    }
  }
  Handler handler_;
  bool closed_ = false;  // after Close: requests racing with it get no answer
  int fd_ = -1;
  int client_fd_ = -1;
  std::thread thread_;
};

TEST_CASE("qmp client negotiates, executes, queues events", "[qmp]") {
  FakeQemu fake([](FakeQemu& f, const Json& req) {
    const std::string cmd = AsString(*FindMember(req, "execute"));
    if (cmd == "query-status") {
      f.SendRaw(R"({"timestamp": {"seconds": 10, "microseconds": 5}, "event": "STOP"})" "\r\n");
      // The reply arrives split across writes.
      std::string r = JsonText(Json::object({{"return", Json::object({{"running", false}, {"status", "paused"}})},
                                  {"id", *FindMember(req, "id")}})) + "\r\n";
      f.SendRaw(r.substr(0, 7));
      f.SendRaw(r.substr(7));
    } else if (cmd == "migrate-incoming") {
      f.SendRaw(JsonText(Json::object({{"error", Json::object({{"class", "GenericError"}, {"desc", "Postcopy is not supported"}})},
                           {"id", *FindMember(req, "id")}})) + "\n");
    } else if (cmd == "nosuch") {
      f.SendRaw(JsonText(Json::object({{"error", Json::object({{"class", "CommandNotFound"}, {"desc", "The command nosuch has not been found"}})},
                           {"id", *FindMember(req, "id")}})) + "\n");
    } else if (cmd == "getfd") {
      f.Reply(req, Json::object());
    } else if (cmd == "human-monitor-command") {
      f.Reply(req, "hello\r\n");
    } else if (cmd == "slow") {
      // never answers
    } else if (cmd == "quit") {
      f.Reply(req, Json::object());
      f.SendRaw(R"({"timestamp": {"seconds": 11, "microseconds": 0}, "event": "SHUTDOWN", "data": {"guest": false}})" "\r\n");
      f.Close();
    }
  });
  auto c = QmpClient::Adopt(dup(fake.client_fd()), "qmp test", 2000);
  close(fake.client_fd());
  REQUIRE(c.has_value());
  QmpClient& q = **c;
  REQUIRE(q.greeting().value(Json::json_pointer("/version/qemu/major"), 0) == 7);

  auto st = q.Execute("query-status");
  REQUIRE(st.has_value());
  REQUIRE(AsString(*FindMember(*st, "status")) == "paused");
  auto ev = q.WaitForEvent("STOP", 0);
  REQUIRE(ev.has_value());
  REQUIRE(ev->host_time_us == 10000005);

  auto err = q.Execute("migrate-incoming", Json::object({{"uri", "fd:x"}}));
  REQUIRE_FALSE(err.has_value());
  REQUIRE(err.error().code() == StatusCode::kInvalidArgument);
  REQUIRE(err.error().message() == "qmp test: migrate-incoming: GenericError: Postcopy is not supported");
  REQUIRE(q.Execute("nosuch").error().code() == StatusCode::kUnsupported);

  int pfd[2];
  REQUIRE(pipe(pfd) == 0);
  REQUIRE(q.ExecuteWithFd("getfd", Json::object({{"fdname", "x"}}), pfd[0]).has_value());
  REQUIRE(fake.received_fd >= 0);
  close(fake.received_fd);
  close(pfd[0]);
  close(pfd[1]);

  REQUIRE(*q.HumanMonitorCommand("info status") == "hello\r\n");

  auto slow = q.Execute("slow", Json(), 100);
  REQUIRE_FALSE(slow.has_value());
  REQUIRE(slow.error().code() == StatusCode::kIoError);
  auto no_event = q.WaitForEvent("RESUME", 50);
  REQUIRE_FALSE(no_event.has_value());

  REQUIRE(q.Execute("quit").has_value());
  auto shutdown_ev = q.WaitForEvent("SHUTDOWN", 1000, [](const Json& d) { return !AsBool(*FindMember(d, "guest")); });
  REQUIRE(shutdown_ev.has_value());
  auto gone = q.Execute("query-status", Json(), 1000);
  REQUIRE_FALSE(gone.has_value());
  REQUIRE(gone.error().code() == StatusCode::kIoError);
}

TEST_CASE("qmp connect gives up on a missing socket", "[qmp]") {
  auto c = QmpClient::Connect("/nonexistent/halite-qmp.sock", 100);
  REQUIRE_FALSE(c.has_value());
  REQUIRE(c.error().code() == StatusCode::kIoError);
}

}  // namespace
}  // namespace halite::qemu
