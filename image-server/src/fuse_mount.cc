#include "fuse_mount.h"

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
  fuse_session_exit(session_);
  // Unmounting ends the kernel connection, which wakes the loop's threads.
  if (mounted_) fuse_session_unmount(session_);
  mounted_ = false;
  if (loop_.joinable()) loop_.join();
  fuse_session_destroy(session_);
  session_ = nullptr;
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
