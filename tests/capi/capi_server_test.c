/* The C API of the host image server (hlt_server_*), compiled as C99 and linked to libhalite.so like a C VMM: an
 * encrypted checkpoint served by libhalite's daemon (found beside the library: PATH is an empty directory) with its
 * key file, its regions read back as image files ('/' in a name as %2f), a second handle finding the same server,
 * a stop refused while a file is open and obeyed with force, a server stopping by itself once unused, and the
 * errors of a bad program, a bad region and calls out of order.
 * Exit 0 pass, 1 fail, 77 skipped (no /dev/fuse or no right to mount FUSE: said loudly). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capi_test_util.h"
#include "halite/halite_c.h"

enum { kPages = 48, kRomPages = 2 };

static void Save(const char* path, const char* key_file) {
  hlt_writer* w;
  unsigned char page[HLT_PAGE_SIZE];
  uint32_t ram, rom;
  uint64_t p;
  ExpectRc(hlt_writer_create(path, &w), HLT_OK, "create");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_BLOCK_PAGES, 4), HLT_OK, "block pages");
  ExpectRc(hlt_writer_set_string(w, HLT_WRITER_ENCRYPT_KEY_FILE, key_file), HLT_OK, "key file");
  ExpectRc(hlt_writer_add_region(w, "pc.ram", 0, kPages * HLT_PAGE_SIZE, &ram), HLT_OK, "region pc.ram");
  ExpectRc(hlt_writer_add_region(w, "/rom@etc/x", 0, kRomPages * HLT_PAGE_SIZE, &rom), HLT_OK, "region rom");
  for (p = 0; p < kPages; ++p) {
    FillPage(p, 7, page);
    ExpectRc(hlt_writer_put_page(w, ram, p, page), HLT_OK, "put_page");
  }
  for (p = 0; p < kRomPages; ++p) {
    FillPage(p, 9, page);
    ExpectRc(hlt_writer_put_page(w, rom, p, page), HLT_OK, "put_page rom");
  }
  ExpectRc(hlt_writer_finish(w), HLT_OK, "finish");
}

static void ExpectImage(const char* path, uint64_t pages, uint32_t stamp) {
  unsigned char got[HLT_PAGE_SIZE], want[HLT_PAGE_SIZE];
  uint64_t p;
  int fd = open(path, O_RDONLY);
  Expect(fd >= 0, "the image file opens");
  for (p = 0; p < pages; ++p) {
    FillPage(p, stamp, want);
    Expect(pread(fd, got, sizeof got, (off_t)(p * HLT_PAGE_SIZE)) == (ssize_t)sizeof got, "a page reads");
    Expect(memcmp(got, want, sizeof got) == 0, "the image holds the saved page");
  }
  close(fd);
}

static int Exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static hlt_server* Start(const char* ckpt, const char* images, const hlt_open_options* o, int64_t unused_s) {
  hlt_server* s;
  ExpectRc(hlt_server_create(ckpt, &s), HLT_OK, "hlt_server_create");
  ExpectRc(hlt_server_set_string(s, HLT_SERVER_IMAGE_DIR, images), HLT_OK, "image dir");
  ExpectRc(hlt_server_set_param(s, HLT_SERVER_EXIT_WHEN_UNUSED, unused_s), HLT_OK, "exit when unused");
  ExpectRc(hlt_server_set_open_options(s, o), HLT_OK, "open options (the key file)");
  return s;
}

/* The server runs libhalite's daemon, not a tool. */
static void ExpectDaemon(uint64_t pid) {
  char link[64], exe[PATH_MAX];
  ssize_t n;
  snprintf(link, sizeof link, "/proc/%llu/exe", (unsigned long long)pid);
  n = readlink(link, exe, sizeof exe - 1);
  Expect(n > 0, "the server's /proc/PID/exe reads");
  exe[n] = '\0';
  printf("image server: pid %llu runs %s\n", (unsigned long long)pid, exe);
  Expect(strstr(exe, "/halite-image-server") != NULL, "the server is the halite-image-server daemon");
}

static void Errors(const char* ckpt, const char* images, const hlt_open_options* o) {
  hlt_server* s;
  const char* text;
  char missing[PATH_MAX];
  uint64_t pid;
  int started;
  ExpectRc(hlt_server_create("", &s), HLT_EINVAL, "an empty checkpoint");
  s = Start(ckpt, images, o, 0);
  ExpectRc(hlt_server_get_mount(s, &text), HLT_EINVAL, "the mount before start");
  ExpectRc(hlt_server_get_pid(s, &pid, &started), HLT_EINVAL, "the pid before start");
  ExpectRc(hlt_server_stop(s, 0, 0), HLT_EINVAL, "stop before start");
  ExpectRc(hlt_server_set_param(s, HLT_SERVER_EXIT_WHEN_UNUSED, -1), HLT_EINVAL, "negative seconds");
  ExpectRc(hlt_server_set_param(s, HLT_SERVER_START_TIMEOUT, 0), HLT_EINVAL, "a zero timeout");
  ExpectRc(hlt_server_set_param(s, (hlt_server_param)99, 1), HLT_EINVAL, "an unknown parameter");
  ExpectRc(hlt_server_set_string(s, HLT_SERVER_PROGRAM, PathIn(images, "no-such-daemon")), HLT_OK, "program");
  ExpectRc(hlt_server_start(s), HLT_EIO, "a program that cannot run");
  ExpectLastErrorHas("exited", "the server that did not start is said to have exited");
  hlt_server_destroy(s);
  snprintf(missing, sizeof missing, "%s", PathIn(images, "missing.hlt"));
  s = Start(missing, images, o, 0);
  ExpectRc(hlt_server_start(s), HLT_EIO, "a missing checkpoint");
  hlt_server_destroy(s);
  hlt_server_destroy(NULL);
}

int main(void) {
  const char* dir;
  const char* hex = "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf\n";
  char ckpt[PATH_MAX], images[PATH_MAX]; /* PathIn's buffers rotate */
  const char *mount, *ram, *rom, *again;
  hlt_open_options* o;
  hlt_server *s, *t, *u;
  uint64_t pid, pid2;
  int started, fd, status;
  time_t deadline;
  if (access("/dev/fuse", R_OK | W_OK) != 0) {
    printf("**********\ncapi_server_test: SKIPPED: no usable /dev/fuse (the image server is a FUSE file system)\n");
    return 77;
  }
  dir = ScratchDir();
  snprintf(images, sizeof images, "%s", PathIn(dir, "images"));
  mkdir(PathIn(dir, "empty-bin"), 0755);
  setenv("PATH", PathIn(dir, "empty-bin"), 1); /* no tool and no daemon on PATH: the library finds its own */
  WriteFile(PathIn(dir, "k.key"), hex, strlen(hex));
  snprintf(ckpt, sizeof ckpt, "%s", PathIn(dir, "enc.hlt"));
  Save(ckpt, PathIn(dir, "k.key"));
  ExpectRc(hlt_open_options_create(&o), HLT_OK, "options");
  ExpectRc(hlt_open_options_set_param(o, HLT_OPEN_ENVIRONMENT, 0), HLT_OK, "no environment");
  ExpectRc(hlt_open_options_set_string(o, HLT_OPEN_KEY_FILE, PathIn(dir, "k.key")), HLT_OK, "key file");

  Errors(ckpt, images, o);

  s = Start(ckpt, images, o, 0);
  if (hlt_server_start(s) != HLT_OK) {
    if (strstr(hlt_last_error(), "fuse") || strstr(hlt_last_error(), "mount")) {
      printf("**********\ncapi_server_test: SKIPPED: FUSE mount refused here: %s\n", hlt_last_error());
      RemoveScratch();
      return 77;
    }
    ExpectRc(HLT_EIO, HLT_OK, "hlt_server_start");
  }
  ExpectRc(hlt_server_start(s), HLT_EINVAL, "a handle starts once");
  ExpectRc(hlt_server_set_param(s, HLT_SERVER_EXIT_WHEN_UNUSED, 5), HLT_EINVAL, "a setter after start");
  ExpectRc(hlt_server_get_mount(s, &mount), HLT_OK, "mount");
  ExpectRc(hlt_server_get_pid(s, &pid, &started), HLT_OK, "pid");
  Expect(started == 1 && pid > 0, "this handle started the server");
  ExpectDaemon(pid);
  ExpectRc(hlt_server_get_image(s, "pc.ram", &ram), HLT_OK, "image of pc.ram");
  ExpectRc(hlt_server_get_image(s, "/rom@etc/x", &rom), HLT_OK, "image of the rom");
  Expect(strstr(rom, "/ckpt.%2from@etc%2fx") != NULL, "'/' in a region's name reads %2f");
  ExpectRc(hlt_server_get_image(s, "nope", &again), HLT_ENOTFOUND, "no such region");
  ExpectImage(ram, kPages, 7);
  ExpectImage(rom, kRomPages, 9);
  Expect(Exists(PathIn(mount, ".stats")), "the mount has .stats");
  printf("served at %s: %s equals the saved pages\n", mount, ram);

  /* A second handle of the same checkpoint finds the server. */
  t = Start(ckpt, images, o, 0);
  ExpectRc(hlt_server_start(t), HLT_OK, "the second handle starts");
  ExpectRc(hlt_server_get_pid(t, &pid2, &started), HLT_OK, "pid of the found server");
  Expect(started == 0 && pid2 == pid, "the second handle found the same server (its pid from .stats)");
  hlt_server_destroy(t);

  /* A file open (a VMM's mapping) refuses a plain stop, and force stops anyway. */
  fd = open(ram, O_RDONLY);
  Expect(fd >= 0, "open the image");
  ExpectRc(hlt_server_stop(s, 0, 1500), HLT_EABORTED, "a plain stop while a file is open");
  ExpectLastErrorHas("did not stop", "the refusal says so");
  Expect(kill((pid_t)pid, 0) == 0, "the server still runs after the refusal");
  ExpectRc(hlt_server_stop(s, 1, 10000), HLT_OK, "a forced stop");
  close(fd);
  Expect(!Exists(ram), "the image is gone once the server stopped (unmounted)");
  hlt_server_destroy(s);

  /* A server stops by itself once unused (HLT_SERVER_EXIT_WHEN_UNUSED); plain stop of an unused one. */
  u = Start(ckpt, images, o, 1);
  ExpectRc(hlt_server_start(u), HLT_OK, "start a server that exits when unused");
  ExpectRc(hlt_server_get_pid(u, &pid, &started), HLT_OK, "pid");
  Expect(started == 1, "a fresh server started");
  deadline = time(NULL) + 15;
  while (waitpid((pid_t)pid, &status, WNOHANG) == 0 && time(NULL) < deadline) {
    struct timespec tick = {0, 50000000};
    nanosleep(&tick, NULL);
  }
  Expect(kill((pid_t)pid, 0) != 0, "the unused server stopped by itself within 15 s");
  ExpectRc(hlt_server_stop(u, 0, 1000), HLT_OK, "stop of a server already gone");
  hlt_server_destroy(u);
  u = Start(ckpt, images, o, 0);
  ExpectRc(hlt_server_start(u), HLT_OK, "start again");
  ExpectRc(hlt_server_stop(u, 0, 10000), HLT_OK, "a plain stop of an unused server");
  hlt_server_destroy(u);
  hlt_open_options_free(o);
  RemoveScratch();
  printf("capi server: OK\n");
  return 0;
}
