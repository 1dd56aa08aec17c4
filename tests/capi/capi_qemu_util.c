/* What the C API's QEMU tests share: find QEMU, launch one with a QMP socket, talk QMP. */
#include "capi_qemu_util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capi_test_util.h"

pid_t qemu_pid = -1;

void KillQemu(void) {
  if (qemu_pid > 0) {
    kill(qemu_pid, SIGKILL);
    waitpid(qemu_pid, NULL, 0);
    qemu_pid = -1;
  }
}

void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

const char* QemuBinary(void) {
  const char* env = getenv("HALITE_QEMU");
  if (env && *env) return env;
  static const char* const dirs[] = {"/usr/bin", "/usr/local/bin", "/bin"};
  static char path[256];
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; ++i) {
    snprintf(path, sizeof path, "%s/qemu-system-x86_64", dirs[i]);
    if (access(path, X_OK) == 0) return path;
  }
  return NULL;
}

void LaunchQemu(const char* binary, const char* socket_path, const char* log_path, int mib,
                const char* const* extra) {
  char mem[32], qmp[700];
  snprintf(mem, sizeof mem, "%dM", mib);
  snprintf(qmp, sizeof qmp, "unix:%s,server=on,wait=off", socket_path);
  const char* argv[32] = {binary, "-machine", "pc", "-m", mem, "-accel", "tcg", "-cpu", "qemu64", "-nodefaults",
                          "-display", "none", "-qmp", qmp};
  size_t n = 14;
  for (size_t i = 0; extra && extra[i] && n + 1 < sizeof argv / sizeof argv[0]; ++i) argv[n++] = extra[i];
  argv[n] = NULL;
  qemu_pid = fork();
  Expect(qemu_pid >= 0, "fork");
  if (qemu_pid == 0) {
    FILE* log = freopen(log_path, "w", stderr);
    (void)log;
    execv(binary, (char* const*)argv);
    _exit(127);
  }
  for (int i = 0; i < 200; ++i) { /* up to 10 s for the socket */
    struct stat st;
    if (stat(socket_path, &st) == 0) return;
    int status;
    if (waitpid(qemu_pid, &status, WNOHANG) == qemu_pid) {
      qemu_pid = -1;
      fprintf(stderr, "FAIL: QEMU exited before its QMP socket appeared (log: %s)\n", log_path);
      exit(1);
    }
    SleepMs(50);
  }
  fprintf(stderr, "FAIL: no QMP socket at %s after 10 s\n", socket_path);
  exit(1);
}

/* --then quit: QEMU ends by itself once the checkpoint is written. */
int WaitQemuGone(void) {
  for (int i = 0; i < 200; ++i) {
    if (waitpid(qemu_pid, NULL, WNOHANG) == qemu_pid) {
      qemu_pid = -1;
      return 1;
    }
    SleepMs(50);
  }
  return 0;
}


/* Reads from fd until `needle` is in what came (or 10 s pass); returns 1 when found. */
static int ReadUntil(int fd, const char* needle, char* buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < 200 && !strstr(buf, needle); ++i) {
    ssize_t n = recv(fd, buf + len, cap - 1 - len, MSG_DONTWAIT);
    if (n > 0) {
      len += (size_t)n;
      buf[len] = '\0';
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || len + 1 >= cap) {
      break;
    } else {
      SleepMs(50);
    }
  }
  return strstr(buf, needle) != NULL;
}

int QmpQueryStatus(const char* socket_path, char* status, size_t cap) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path);
  if (fd < 0 || connect(fd, (struct sockaddr*)&addr, sizeof addr) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  char buf[8192];
  const char caps[] = "{\"execute\":\"qmp_capabilities\"}\n";
  const char query[] = "{\"execute\":\"query-status\"}\n";
  int ok = ReadUntil(fd, "QMP", buf, sizeof buf) && send(fd, caps, sizeof caps - 1, 0) > 0 &&
           ReadUntil(fd, "return", buf, sizeof buf) && send(fd, query, sizeof query - 1, 0) > 0 &&
           ReadUntil(fd, "\"status\"", buf, sizeof buf);
  close(fd);
  if (!ok) return 0;
  const char* p = strstr(buf, "\"status\"");
  p = strchr(p + 8, '"');
  const char* end = p ? strchr(p + 1, '"') : NULL;
  if (!end) return 0;
  snprintf(status, cap, "%.*s", (int)(end - p - 1), p + 1);
  return 1;
}

int ProcessGone(pid_t pid) {
  if (waitpid(pid, NULL, WNOHANG) == pid) return 1;
  char path[64], text[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE* f = fopen(path, "r");
  if (!f) return 1;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  const char* close_paren = strrchr(text, ')');
  /* PID 1 here does not reap: a zombie has stopped. */
  return close_paren && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

int KillAndWaitGone(pid_t pid) {
  kill(pid, SIGKILL);
  for (int i = 0; i < 200; ++i) {
    if (ProcessGone(pid)) return 1;
    SleepMs(50);
  }
  return 0;
}
