#include "fuse_mount.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace halite::image_server {

Status FuseMount::Mount(const std::vector<std::string>& options, const fuse_lowlevel_ops& ops, void* userdata,
                        const std::string& mountpoint, const std::string& what, unsigned max_threads) {
  std::vector<std::string> argv = {"halite"};
  for (const std::string& o : options) argv.insert(argv.end(), {"-o", o});
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(cargv.size()), cargv.data());
  session_ = fuse_session_new(&args, &ops, sizeof ops, userdata);
  fuse_opt_free_args(&args);
  if (session_ == nullptr) return Status::IoError(mountpoint + ": FUSE refused the session options");
  if (fuse_session_mount(session_, mountpoint.c_str()) != 0) {
    fuse_session_destroy(session_);
    session_ = nullptr;
    return Status::IoError(mountpoint + ": cannot mount " + what +
                           " there (no /dev/fuse, not a directory, or no right to mount; fuse3 installed?)");
  }
  mounted_ = true;
  what_ = what;
  mountpoint_ = mountpoint;
  {
    std::lock_guard<std::mutex> lock(mu_);
    loop_started_ = true;
  }
  loop_ = std::thread([this, max_threads] {
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, max_threads);
    fuse_session_loop_mt(session_, config);
    fuse_loop_cfg_destroy(config);
    std::lock_guard<std::mutex> lock(mu_);
    loop_done_ = true;
    cv_.notify_all();
  });
  return Status::Ok();
}

void FuseMount::Unmount() {
  if (session_ == nullptr) return;
  // The session's threads block every signal and sit in read() of /dev/fuse: fuse_session_exit only sets a flag,
  // which a thread sees once a request (or the connection's end) wakes it. A lazy unmount ends the connection
  // only when nobody holds the mount any more; while anything does (a clone's mapping at a forced stop, a process
  // whose working directory is inside, the server's own last RELEASE read before the flag was set), the join below
  // waited forever. So the session gets one request of its own first: a GETATTR of the mount's root that no cache
  // may answer (AT_STATX_FORCE_SYNC); the thread that serves it then sees the flag and ends the loop. On a thread
  // of its own, so that the stop stays bounded even if the session cannot answer.
  fuse_session_exit(session_);
  if (mounted_ && !WaitLoopDone(std::chrono::seconds(0))) {
    std::thread([path = mountpoint_] {
      struct statx stx;
      (void)statx(AT_FDCWD, path.c_str(), AT_STATX_FORCE_SYNC | AT_NO_AUTOMOUNT, STATX_MODE, &stx);
    }).detach();
  }
  const bool loop_ended = WaitLoopDone(std::chrono::seconds(10));
  // Unmounting (lazily as root) closes the session's /dev/fuse descriptor. Once the loop's threads are gone
  // nothing else holds it, so the kernel ends the connection: whatever still holds a file of the mount gets
  // ENOTCONN instead of waiting for a server that is gone.
  if (mounted_) fuse_session_unmount(session_);
  mounted_ = false;
  if (loop_.joinable() && !loop_ended && !WaitLoopDone(std::chrono::seconds(10))) {
    // Bounded rather than hung: the threads are stuck in a request of their own. Leave them (and the session they
    // use) to the process's exit, which ends the connection, and say so.
    std::fprintf(stderr, "%s: the FUSE session's threads did not end within 20 s of the stop; leaving them\n",
                 what_.c_str());
    loop_.detach();
    session_ = nullptr;
    return;
  }
  if (loop_.joinable()) loop_.join();
  fuse_session_destroy(session_);
  session_ = nullptr;
}

bool FuseMount::WaitLoopDone(std::chrono::seconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, limit, [&] { return !loop_started_ || loop_done_; });
}

bool FuseMount::Serving() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loop_started_ && !loop_done_;
}

void FuseMount::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return loop_done_; });
}

}  // namespace halite::image_server
