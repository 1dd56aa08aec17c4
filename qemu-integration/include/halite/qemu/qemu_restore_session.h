// A restore of a checkpoint into QEMU, as `hlt-restore qemu` does it, for any program that embeds libhalite: launch
// QEMU (or attach to one started with `-incoming defer`), copy the pages into its memory or map them shared from
// the host's image server (--memory shared), leave a record that lets a later process take over a lazy restore
// whose restorer died (resume), and detach from QEMU at the end so that the guest outlives the restorer.
//
// Usage: RestoreSession::Start(options) prepares everything up to the first byte sent (the QEMU launched or
// reached, the checkpoint opened and checked, the resume record written); Run() restores; then WaitForExit() or
// Detach(). Destroying a session that did not detach kills a QEMU it launched (a paused guest must not be left
// behind), except when Run() left a resumable restore (resumable()).
//
// Not thread-safe: one thread drives a session. The callbacks run on the thread that calls Start or Run (the
// restore's own callbacks in options.restore as RestoreCheckpointIntoQemu documents).
#ifndef HALITE_QEMU_QEMU_RESTORE_SESSION_H_
#define HALITE_QEMU_QEMU_RESTORE_SESSION_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/qemu/qemu_restore_record.h"
#include "halite/status.h"

namespace halite::qemu {

struct RestoreSessionOptions {
  std::string checkpoint;  // a path or an s3:// / rados:// URI
  ReaderOptions reader;

  // Launch mode (qemu_args not empty): QEMU started with these arguments plus `-incoming defer` and a QMP socket.
  std::string qemu_binary;             // empty: $HALITE_QEMU, else qemu-system-x86_64
  std::vector<std::string> qemu_args;  // must not contain -incoming
  std::string qemu_dir;                // QMP socket and logs (created; empty: a new private directory)
  // Attach mode: a QEMU already waiting with `-incoming defer`.
  std::string qmp_socket;

  // Memory shared (launch mode only): guest RAM mapped privately from the image the host's image server exports.
  bool shared_memory = false;
  std::string image_dir = "/run/halite/images";
  // The program whose `serve` mode is the image server, started detached when none serves the checkpoint yet
  // (empty: the halite-image-server daemon, FindImageServerProgram of halite/image_server_process.h), and the reader flags it needs to read the same checkpoint
  // (--block-cache DIR, key flags).
  std::string server_program;
  std::vector<std::string> server_flags;

  // Take over the lazy restore of `checkpoint` whose restorer died: QEMU is found from qemu_dir (its record) or
  // qmp_socket (the record of its pid). A launched QEMU that exited before its guest ran is started again and
  // restored from the start; one stopped before receiving a stream is restored into afresh.
  bool resume = false;

  CheckpointRestoreOptions restore;  // lazy or eager, engine, the restore's callbacks (on_running, on_progress...)

  // Lines that say what the session decided (e.g. "memory shared: QEMU maps ..."), and warnings that do not stop
  // it (a record that could not be written, a device that discards guest RAM). Null: not reported.
  std::function<void(const std::string&)> on_notice;
  std::function<void(const std::string&)> on_warning;
  // Called with the pid of a QEMU the session launched, as soon as it runs (e.g. to kill it from a signal handler).
  std::function<void(pid_t)> on_launched;
};

// When each step happened (wall clock, microseconds since the epoch).
struct RestoreSessionTimes {
  int64_t start_wall_us = 0;       // Start() called
  int64_t open_done_wall_us = 0;   // checkpoint opened and checked
  int64_t qemu_ready_wall_us = 0;  // launched QEMU answering QMP (0 in attach mode)
};

class RestoreSession {
 public:
  // Errors: kInvalidArgument for options that contradict each other or a record that names another QEMU or
  // checkpoint (the message says which), kNotFound when there is nothing to resume, and what opening the
  // checkpoint, launching QEMU or reaching its monitor returns.
  static Result<std::unique_ptr<RestoreSession>> Start(RestoreSessionOptions options);
  ~RestoreSession();
  RestoreSession(const RestoreSession&) = delete;
  RestoreSession& operator=(const RestoreSession&) = delete;

  // Restores to completion (every page in, the migration completed). On success the record is removed. On failure
  // the error says when the launched QEMU died and how; when the guest ran and QEMU waits in postcopy-paused for
  // a cause that can be fixed (not a corrupt checkpoint), QEMU is left running and resumable() is true.
  Status Run();
  // Waits until QEMU exits (launch mode: errors when it died of a signal) or its monitor closes (attach mode).
  Status WaitForExit();
  // QEMU keeps running when the session goes.
  void Detach();

  bool resuming() const { return resuming_; }  // this session resumes an interrupted restore
  bool resumable() const { return resumable_; }
  // After a failed Run with resumable(): the flag that finds this QEMU again ("--qemu-dir DIR" or "--qmp SOCKET").
  std::string ResumeLocator() const;
  pid_t qemu_pid() const { return qemu_pid_; }
  QemuProcess* process() { return proc_.get(); }  // null in attach mode
  QmpClient& qmp() { return *qmp_; }
  const CheckpointReader& reader() const { return *reader_; }
  const std::string& file_id() const { return file_id_; }
  const std::string& qmp_socket() const { return options_.qmp_socket; }
  const std::string& image_path() const { return image_path_; }  // shared memory: the file QEMU maps
  bool started_image_server() const { return started_server_; }
  const CheckpointRestoreResult& result() const { return result_; }
  const RestoreSessionTimes& times() const { return times_; }
  const RestoreSessionOptions& options() const { return options_; }

 private:
  explicit RestoreSession(RestoreSessionOptions options);
  Status ReadPriorRecord();
  Result<bool> DecideFromLiveQemu();
  Status RestartFromRecord();
  Status PrepareSharedMemory();
  Status LaunchAndOpen();
  Status CheckResumeTarget();
  void WriteFreshRecord();
  void Notice(const std::string& line) const;
  void Warning(const std::string& line) const;

  RestoreSessionOptions options_;
  bool launch_ = false;
  bool resuming_ = false;
  bool resumable_ = false;
  std::optional<RestoreRecord> prior_;
  RestoreRecord written_record_;
  std::vector<std::string> record_paths_;
  std::unique_ptr<CheckpointReader> reader_;
  std::unique_ptr<QemuProcess> proc_;
  std::unique_ptr<QmpClient> qmp_;
  pid_t qemu_pid_ = -1;
  std::string file_id_;
  std::string image_path_;
  bool started_server_ = false;
  CheckpointRestoreResult result_;
  RestoreSessionTimes times_;
};

// The contradictions Start refuses before doing anything (kInvalidArgument, with the message hlt-restore prints):
// --resume with QEMU ARGS, neither or both of --qmp and QEMU ARGS, -incoming among QEMU ARGS, --memory shared
// without launching or with QEMU ARGS that choose a memory backend.
Status CheckRestoreSessionOptions(const RestoreSessionOptions& options);

// QEMU's death in words; on shared memory a SIGBUS is a page of the image the server could not give.
std::string DescribeQemuDeath(QemuProcess& process, bool shared_memory);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RESTORE_SESSION_H_
