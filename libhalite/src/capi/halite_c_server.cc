// The C API of the host image server (hlt_server_*): FindOrStartImageServer (halite/image_server_process.h) behind
// setters, and the stop of its process.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "capi/capi_internal.h"
#include "halite/image_server_process.h"

using halite::capi::Code;
using halite::capi::Invalid;

struct hlt_server {
  halite::ImageServerRequest request;
  hlt_open_options open;
  bool started = false;
  halite::ImageServerHandle server;
  std::vector<std::string> regions;
  std::map<std::string, std::string> images;  // hlt_server_get_image's paths, by region
};

namespace {

// The pid in a serving server's MOUNT/.stats ({"mountpoint":..., "pid": N, ...}); 0 when unreadable.
pid_t PidFromStats(const std::string& mount) {
  std::ifstream in(mount + "/.stats");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t at = s.find("\"pid\":");
  return at == std::string::npos ? 0 : pid_t(std::strtoll(s.c_str() + at + 6, nullptr, 10));
}

// Gone: our child reaped, or another's process no longer there (a zombie counts: PID 1 may not reap it).
bool Gone(pid_t pid, bool child) {
  if (child) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    return r == pid || (r < 0 && errno == ECHILD && kill(pid, 0) != 0);
  }
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// Stopped: the process is gone, or its mount is (a forced stop unmounts at once, but the process lingers until the
// last client closes its files: the kernel keeps a lazily unmounted FUSE connection until then).
bool Stopped(pid_t pid, bool child, const std::string& mount) {
  struct stat st;
  return Gone(pid, child) || stat((mount + "/.stats").c_str(), &st) != 0;
}

bool WaitGone(pid_t pid, bool child, const std::string& mount, std::chrono::steady_clock::time_point deadline) {
  while (!Stopped(pid, child, mount)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

extern "C" {

int hlt_server_create(const char* checkpoint, hlt_server** out) {
  if (!checkpoint || !*checkpoint || !out) return Invalid("hlt_server_create: NULL or empty argument");
  auto* s = new hlt_server{};
  s->request.checkpoint = checkpoint;
  s->request.image_dir = "/run/halite/images";
  *out = s;
  return HLT_OK;
}

int hlt_server_set_param(hlt_server* s, hlt_server_param param, int64_t value) {
  if (!s) return Invalid("hlt_server_set_param: NULL server");
  if (s->started) return Invalid("hlt_server_set_param: after hlt_server_start");
  switch (param) {
    case HLT_SERVER_EXIT_WHEN_UNUSED:
      if (value < 0) return Invalid("HLT_SERVER_EXIT_WHEN_UNUSED: expected seconds >= 0");
      s->request.exit_when_unused_s = uint64_t(value);
      return HLT_OK;
    case HLT_SERVER_START_TIMEOUT:
      if (value < 1 || value > 3600) return Invalid("HLT_SERVER_START_TIMEOUT: expected 1..3600 seconds");
      s->request.start_timeout_s = int(value);
      return HLT_OK;
  }
  return Invalid("hlt_server_set_param: unknown parameter");
}

int hlt_server_set_string(hlt_server* s, hlt_server_string option, const char* value) {
  if (!s || !value) return Invalid("hlt_server_set_string: NULL argument");
  if (s->started) return Invalid("hlt_server_set_string: after hlt_server_start");
  switch (option) {
    case HLT_SERVER_IMAGE_DIR:
      if (!*value) return Invalid("HLT_SERVER_IMAGE_DIR: empty");
      s->request.image_dir = value;
      return HLT_OK;
    case HLT_SERVER_PROGRAM: s->request.program = value; return HLT_OK;
  }
  return Invalid("hlt_server_set_string: unknown option");
}

int hlt_server_set_open_options(hlt_server* s, const hlt_open_options* options) {
  if (!s || !options) return Invalid("hlt_server_set_open_options: NULL argument");
  if (s->started) return Invalid("hlt_server_set_open_options: after hlt_server_start");
  s->open = *options;
  return HLT_OK;
}

int hlt_server_start(hlt_server* s) {
  if (!s) return Invalid("hlt_server_start: NULL server");
  if (s->started) return Invalid("hlt_server_start: a server handle starts once");
  halite::ReaderOptions options;
  if (int rc = Code(halite::capi::MakeReaderOptions(s->open, &options)); rc != HLT_OK) return rc;
  auto flags = halite::capi::ServerFlags(s->open, options);
  if (!flags) return Code(flags.error());
  s->request.reader_flags = std::move(*flags);
  s->request.parent_dirs = options.parent_dirs;
  auto reader = halite::CheckpointReader::Open(s->request.checkpoint, options);
  if (!reader) return Code(reader.error());
  auto server = halite::FindOrStartImageServer(s->request, **reader);
  if (!server) return Code(server.error());
  for (const halite::Region& r : (*reader)->regions()) s->regions.push_back(r.name);
  s->server = std::move(*server);
  if (!s->server.started) s->server.pid = PidFromStats(s->server.mount);
  s->started = true;
  return HLT_OK;
}

int hlt_server_get_mount(const hlt_server* s, const char** mount) {
  if (!s || !mount) return Invalid("hlt_server_get_mount: NULL argument");
  if (!s->started) return Invalid("hlt_server_get_mount: before a successful hlt_server_start");
  *mount = s->server.mount.c_str();
  return HLT_OK;
}

int hlt_server_get_image(hlt_server* s, const char* region, const char** path) {
  if (!s || !region || !path) return Invalid("hlt_server_get_image: NULL argument");
  if (!s->started) return Invalid("hlt_server_get_image: before a successful hlt_server_start");
  if (std::find(s->regions.begin(), s->regions.end(), region) == s->regions.end()) {
    return Code(halite::Status::NotFound(s->request.checkpoint + ": no region \"" + region + "\""));
  }
  auto [it, added] = s->images.emplace(region, halite::ServedImagePath(s->server.mount, region));
  *path = it->second.c_str();
  return HLT_OK;
}

int hlt_server_get_pid(const hlt_server* s, uint64_t* pid, int* started) {
  if (!s || !pid || !started) return Invalid("hlt_server_get_pid: NULL argument");
  if (!s->started) return Invalid("hlt_server_get_pid: before a successful hlt_server_start");
  *pid = uint64_t(s->server.pid);
  *started = s->server.started ? 1 : 0;
  return HLT_OK;
}

int hlt_server_stop(hlt_server* s, int force, int64_t timeout_ms) {
  if (!s) return Invalid("hlt_server_stop: NULL server");
  if (!s->started) return Invalid("hlt_server_stop: before a successful hlt_server_start");
  const pid_t pid = s->server.pid;
  if (pid <= 0) {
    return Code(halite::Status::NotFound(s->server.mount + ": the server's pid is unknown (no .stats to read it)"));
  }
  const bool child = s->server.started;
  const auto deadline = timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                                       : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (Gone(pid, child)) return HLT_OK;
  kill(pid, SIGTERM);
  if (force) {
    // A refusal comes within the serve loop's 100 ms tick; the second signal, within 5 s of it, insists.
    const auto first = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(300));
    if (!WaitGone(pid, child, s->server.mount, first)) kill(pid, SIGTERM);
  }
  if (!WaitGone(pid, child, s->server.mount, deadline)) {
    return Code(halite::Status::Aborted(
        "the image server at " + s->server.mount + " (pid " + std::to_string(pid) + ") did not stop within " +
        std::to_string(timeout_ms) + " ms" + (force ? "" : " (a VMM maps one of its files: stop with force)") +
        "; its log " + s->server.log));
  }
  return HLT_OK;
}

void hlt_server_destroy(hlt_server* s) { delete s; }

}  // extern "C"
