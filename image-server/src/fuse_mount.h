// One FUSE low-level session mounted at a directory and served by its own threads: what the image server and the
// RAM directory server share (they differ in their operations only). Not thread-safe itself: Mount, Unmount and
// the destructor come from one owner; Serving and Wait may be called from any thread.
#ifndef HALITE_IMAGE_SERVER_FUSE_MOUNT_H_
#define HALITE_IMAGE_SERVER_FUSE_MOUNT_H_

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif
#include <fuse_lowlevel.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "halite/status.h"

namespace halite::image_server {

class FuseMount {
 public:
  FuseMount() = default;
  FuseMount(const FuseMount&) = delete;
  FuseMount& operator=(const FuseMount&) = delete;
  ~FuseMount() { Unmount(); }

  // Creates a session with `options` (libfuse's -o options: "fsname=...", "allow_other"), mounts it at `mountpoint`
  // and serves requests with `ops` on up to `max_threads` threads; `userdata` is what fuse_req_userdata returns.
  // `what` names the server in errors ("the image server").
  Status Mount(const std::vector<std::string>& options, const fuse_lowlevel_ops& ops, void* userdata,
               const std::string& mountpoint, const std::string& what, unsigned max_threads);
  // Ends the session: wakes the serving threads with a request of its own, unmounts, joins them. Bounded: a mount
  // something still holds does not keep it waiting (those holders get ENOTCONN); threads stuck for 20 s are left
  // to the process's exit, said on stderr. Idempotent.
  void Unmount();

  // The session, for notifications (fuse_lowlevel_notify_store); null before Mount and after Unmount.
  fuse_session* session() const { return session_; }
  // Mounted and still serving: false once the mount went away (unmounted from outside too).
  bool Serving() const;
  // Until the serving threads have stopped.
  void Wait();

 private:
  // Whether the serving threads have stopped (or never started), waiting at most `limit`.
  bool WaitLoopDone(std::chrono::seconds limit);

  fuse_session* session_ = nullptr;
  bool mounted_ = false;
  std::string what_;  // names the server in messages
  std::string mountpoint_;
  std::thread loop_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool loop_started_ = false;  // under mu_
  bool loop_done_ = false;     // under mu_
};

}  // namespace halite::image_server

#endif  // HALITE_IMAGE_SERVER_FUSE_MOUNT_H_
