// A QMP (QEMU Machine Protocol) client over a unix socket.
//
// Handles the greeting and capability negotiation, runs commands and returns their "return" value, keeps the
// asynchronous events (STOP, RESUME, MIGRATION, ...) that arrive meanwhile, and lets a caller wait for one.
// Every call takes a timeout: nothing here blocks forever, and a QEMU that exits gives an io-error.
// Not thread-safe: use one QmpClient from one thread at a time (a second connection is cheap if needed).
#ifndef HALITE_QEMU_QEMU_QMP_CLIENT_H_
#define HALITE_QEMU_QEMU_QMP_CLIENT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "halite/qemu/qemu_json.h"
#include "halite/status.h"

namespace halite::qemu {

struct QmpEvent {
  std::string name;       // "MIGRATION", "STOP", ...
  Json data;              // the event's "data" member (null when absent)
  int64_t host_time_us;   // QEMU's timestamp (host wall clock, microseconds since the epoch)
};

class QmpClient {
 public:
  // Connects to socket_path, retrying while the socket does not exist or refuses (QEMU may still be starting),
  // until timeout_ms. Then reads the greeting and sends qmp_capabilities.
  static Result<std::unique_ptr<QmpClient>> Connect(const std::string& socket_path, int timeout_ms = 10000);
  // Same over an already connected stream socket; takes ownership of fd.
  static Result<std::unique_ptr<QmpClient>> Adopt(int fd, std::string name, int timeout_ms = 10000);
  ~QmpClient();
  QmpClient(const QmpClient&) = delete;
  QmpClient& operator=(const QmpClient&) = delete;

  // The greeting's "QMP" member (version, capabilities).
  const Json& greeting() const { return greeting_; }

  // Runs a command and returns its "return" value. A QEMU error becomes a Status whose message names the
  // command, QEMU's error class and description: "qmp: migrate-incoming: GenericError: Postcopy is not
  // supported" (code unsupported for CommandNotFound, invalid-argument otherwise). A timeout or a closed
  // connection is an io-error. Events seen while waiting are queued.
  Result<Json> Execute(std::string_view command, const Json& arguments = Json(), int timeout_ms = 30000);
  // Same, passing fd along with the message (SCM_RIGHTS): for "getfd" and "add-fd". The caller keeps its fd.
  Result<Json> ExecuteWithFd(std::string_view command, const Json& arguments, int fd, int timeout_ms = 30000);
  // human-monitor-command: returns HMP's text output.
  Result<std::string> HumanMonitorCommand(std::string_view command_line, int timeout_ms = 30000);

  // Returns the oldest queued event named `name` whose data satisfies `match` (all when empty), reading more
  // from QEMU until timeout_ms; removes it from the queue. Other events stay queued.
  Result<QmpEvent> WaitForEvent(std::string_view name, int timeout_ms,
                                const std::function<bool(const Json&)>& match = {});
  // Reads whatever QEMU has already sent, without waiting, then returns and clears the queued events.
  Result<std::vector<QmpEvent>> TakeEvents();

  const std::string& name() const { return name_; }

 private:
  QmpClient(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  Status Handshake(int timeout_ms);
  Status Send(const std::string& text, int pass_fd, int timeout_ms);
  // Reads until one complete message is framed, or the deadline passes (timeout_ms < 0: no wait at all,
  // returns a null Json when nothing is complete).
  Result<Json> ReadMessage(int timeout_ms, const char* waiting_for);
  void QueueEvent(const Json& msg);

  int fd_;
  std::string name_;
  Json greeting_;
  JsonFramer framer_;
  std::deque<QmpEvent> events_;
  int64_t next_id_ = 1;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_QMP_CLIENT_H_
