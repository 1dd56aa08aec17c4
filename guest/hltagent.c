// hltagent: a small QEMU guest agent for the test guest (the busybox initramfs has no qemu-guest-agent).
//
// Speaks QEMU's guest agent protocol (one JSON command a line on the virtio-serial port
// org.qemu.guest_agent.0, one JSON reply a line) for the few commands libvirt and the tests use:
//   guest-sync {"id": N}            -> {"return": N}     (libvirt sends it before each command)
//   guest-sync-delimited {"id": N}  -> 0xFF then {"return": N}
//   guest-ping                      -> {"return": {}}
//   guest-get-time                  -> {"return": NANOSECONDS}            (CLOCK_REALTIME)
//   guest-set-time {"time": NS}     -> sets CLOCK_REALTIME, {"return": {}}; without "time": {"return": {}} and
//                                      nothing changed (there is no RTC to read here)
//   guest-info                      -> {"return": {"version": "hltagent", "supported_commands": [...]}}
// Anything else gets a CommandNotFound error. A line on the console records what changed the clock
// ("HLT-GUEST AGENT set-time ..."), so a test sees from the guest that a restore synced it.
//
// The parser is deliberately small: it looks for "execute":"NAME" and the integer after "id" or "time". The input
// comes only from the host's libvirt through a port of this VM.
//
// usage: hltagent [PORT_DEVICE]   (default: the /dev/vportNpM whose name is org.qemu.guest_agent.0)
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char kPortName[] = "org.qemu.guest_agent.0";

// /sys/class/virtio-ports/vportNpM/name holds the port's name; the device is /dev/vportNpM.
static int FindPort(char* out, size_t size) {
  DIR* d = opendir("/sys/class/virtio-ports");
  if (d == NULL) return -1;
  struct dirent* e;
  int found = -1;
  while ((e = readdir(d)) != NULL && found != 0) {
    if (e->d_name[0] == '.') continue;
    char path[512], name[128] = {0};
    if (strlen(e->d_name) > 200) continue;
    snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(name, sizeof name, f) != NULL) {
      name[strcspn(name, "\n")] = 0;
      if (strcmp(name, kPortName) == 0) {
        snprintf(out, size, "/dev/%s", e->d_name);
        found = 0;
      }
    }
    fclose(f);
  }
  closedir(d);
  return found;
}

// The command name after "execute", or "" when there is none.
static void CommandName(const char* line, char* out, size_t size) {
  out[0] = 0;
  const char* p = strstr(line, "\"execute\"");
  if (p == NULL) return;
  p = strchr(p + 9, '"');
  if (p == NULL) return;
  p++;
  size_t n = 0;
  while (*p && *p != '"' && n + 1 < size) out[n++] = *p++;
  out[n] = 0;
}

// The integer after "key": in line; 1 when found.
static int IntegerArgument(const char* line, const char* key, long long* value) {
  char quoted[64];
  snprintf(quoted, sizeof quoted, "\"%s\"", key);
  const char* p = strstr(line, quoted);
  if (p == NULL) return 0;
  p = strchr(p + strlen(quoted), ':');
  if (p == NULL) return 0;
  p++;
  while (isspace((unsigned char)*p)) p++;
  char* end;
  errno = 0;
  long long v = strtoll(p, &end, 10);
  if (end == p || errno != 0) return 0;
  *value = v;
  return 1;
}

static long long NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void Reply(int fd, const char* text) {
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t n = write(fd, text + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += (size_t)n;
  }
}

static void Handle(int fd, const char* line) {
  char cmd[64], buf[512];
  long long v = 0;
  CommandName(line, cmd, sizeof cmd);
  if (strcmp(cmd, "guest-sync") == 0 || strcmp(cmd, "guest-sync-delimited") == 0) {
    IntegerArgument(line, "id", &v);
    if (strcmp(cmd, "guest-sync-delimited") == 0) Reply(fd, "\xff");
    snprintf(buf, sizeof buf, "{\"return\": %lld}\n", v);
  } else if (strcmp(cmd, "guest-ping") == 0) {
    snprintf(buf, sizeof buf, "{\"return\": {}}\n");
  } else if (strcmp(cmd, "guest-get-time") == 0) {
    snprintf(buf, sizeof buf, "{\"return\": %lld}\n", NowNs());
  } else if (strcmp(cmd, "guest-set-time") == 0) {
    if (IntegerArgument(line, "time", &v)) {
      const long long before = NowNs();
      struct timespec ts = {.tv_sec = v / 1000000000LL, .tv_nsec = v % 1000000000LL};
      if (clock_settime(CLOCK_REALTIME, &ts) != 0) {
        snprintf(buf, sizeof buf, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"clock_settime: %s\"}}\n",
                 strerror(errno));
      } else {
        printf("HLT-GUEST AGENT set-time %lld.%09lld (the clock moved %+.3f s)\n", v / 1000000000LL,
               v % 1000000000LL, (double)(v - before) / 1e9);
        fflush(stdout);
        snprintf(buf, sizeof buf, "{\"return\": {}}\n");
      }
    } else {
      snprintf(buf, sizeof buf, "{\"return\": {}}\n");
    }
  } else if (strcmp(cmd, "guest-info") == 0) {
    snprintf(buf, sizeof buf,
             "{\"return\": {\"version\": \"hltagent\", \"supported_commands\": ["
             "{\"name\": \"guest-sync\", \"enabled\": true}, {\"name\": \"guest-ping\", \"enabled\": true}, "
             "{\"name\": \"guest-get-time\", \"enabled\": true}, {\"name\": \"guest-set-time\", \"enabled\": true}"
             "]}}\n");
  } else if (cmd[0] == 0) {
    return;  // not a command (a delimiter, an empty line)
  } else {
    snprintf(buf, sizeof buf,
             "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command %s has not been found\"}}\n", cmd);
  }
  Reply(fd, buf);
}

int main(int argc, char** argv) {
  char port[512];
  if (argc > 1) {
    snprintf(port, sizeof port, "%s", argv[1]);
  } else if (FindPort(port, sizeof port) != 0) {
    fprintf(stderr, "hltagent: no virtio-serial port named %s\n", kPortName);
    return 1;
  }
  const int fd = open(port, O_RDWR | O_NOCTTY);
  if (fd < 0) {
    fprintf(stderr, "hltagent: %s: %s\n", port, strerror(errno));
    return 1;
  }
  printf("HLT-GUEST AGENT listening on %s\n", port);
  fflush(stdout);
  char line[8192];
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, line + have, sizeof line - 1 - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The host side is not connected (read returns 0): wait for it.
      usleep(200000);
      continue;
    }
    have += (size_t)n;
    line[have] = 0;
    char* start = line;
    char* nl;
    while ((nl = memchr(start, '\n', have - (size_t)(start - line))) != NULL) {
      *nl = 0;
      Handle(fd, start);
      start = nl + 1;
    }
    have -= (size_t)(start - line);
    memmove(line, start, have);
    if (have == sizeof line - 1) have = 0;  // a line too long to be a command: dropped
  }
}
