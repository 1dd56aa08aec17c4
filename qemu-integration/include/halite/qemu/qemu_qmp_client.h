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

#include "halite/qemu/qmp_json.h"
#include "halite/status.h"

namespace halite::qemu {

struct QmpEvent {
  std::string name;       // "MIGRATION", "STOP", ...
  Json data;              // the event's "data" member (null when absent)
  int64_t host_time_us;   // QEMU's timestamp (host wall clock, microseconds since the epoch)
};

// A QMP conversation with one QEMU, however it is reached: a monitor socket of its own (Connect, Adopt), or a
// management layer's passthrough (halite/libvirt/libvirt_qmp.h). Implementations provide ExecuteWithFd and
// ReadEvents; the event queue is shared.
class QmpClient {
 public:
  // Connects to socket_path, retrying while the socket does not exist or refuses (QEMU may still be starting),
  // until timeout_ms. Then reads the greeting and sends qmp_capabilities.
  static Result<std::unique_ptr<QmpClient>> Connect(const std::string& socket_path, int timeout_ms = 10000);
  // Same over an already connected stream socket; takes ownership of fd.
  static Result<std::unique_ptr<QmpClient>> Adopt(int fd, std::string name, int timeout_ms = 10000);
  virtual ~QmpClient() = default;
  QmpClient(const QmpClient&) = delete;
  QmpClient& operator=(const QmpClient&) = delete;

  // The greeting's "QMP" member (version, capabilities); null when the transport has no greeting.
  const Json& greeting() const { return greeting_; }

  // Runs a command and returns its "return" value. A QEMU error becomes a Status whose message names the
  // command, QEMU's error class and description: "qmp: migrate-incoming: GenericError: Postcopy is not
  // supported" (code unsupported for CommandNotFound, invalid-argument otherwise). A timeout or a closed
  // connection is an io-error. Events seen while waiting are queued.
  Result<Json> Execute(std::string_view command, const Json& arguments = Json(), int timeout_ms = 30000) {
    return ExecuteWithFd(command, arguments, -1, timeout_ms);
  }
  // Same, passing fd along with the command (SCM_RIGHTS): for "getfd" and "add-fd". The caller keeps its fd.
  virtual Result<Json> ExecuteWithFd(std::string_view command, const Json& arguments, int fd,
                                     int timeout_ms = 30000) = 0;
  // human-monitor-command: returns HMP's text output.
  Result<std::string> HumanMonitorCommand(std::string_view command_line, int timeout_ms = 30000);

  // Returns the oldest queued event named `name` whose data satisfies `match` (all when empty), reading more
  // from QEMU until timeout_ms; removes it from the queue. Other events stay queued.
  Result<QmpEvent> WaitForEvent(std::string_view name, int timeout_ms,
                                const std::function<bool(const Json&)>& match = {});
  // Reads whatever QEMU has already sent, without waiting, then returns and clears the queued events.
  Result<std::vector<QmpEvent>> TakeEvents();

  const std::string& name() const { return name_; }
  // The process at the other end of the connection (SO_PEERCRED of a unix socket): QEMU's pid, or -1 when the
  // transport cannot tell.
  virtual int PeerPid() const { return -1; }

 protected:
  explicit QmpClient(std::string name) : name_(std::move(name)) {}
  // Queues the events that arrive within timeout_ms (at least one, or a retryable io-error naming
  // `waiting_for` when none does); timeout_ms < 0: only those already there, never an error for none.
  virtual Status ReadEvents(int timeout_ms, const char* waiting_for) = 0;
  void QueueEvent(QmpEvent event) { events_.push_back(std::move(event)); }
  // A QMP error object ({"class": ..., "desc": ...}) as a Status naming `command`.
  Status ErrorStatus(std::string_view command, const Json& error) const;
  // An event message ({"event": ..., "data": ..., "timestamp": ...}) as a QmpEvent.
  static QmpEvent EventOf(const Json& message);

  std::string name_;
  Json greeting_;

 private:
  std::deque<QmpEvent> events_;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_QMP_CLIENT_H_
