/* hlt-restore libvirt through the C API (HLT_SESSION_LIBVIRT), against a real libvirt: run by
 * capi_libvirt_session_test.py, which boots the test guest as domain "desk" under libvirt's embedded QEMU driver
 * (TCG), runs this program (which saves it, then restores it), then checks that each domain restored here continues
 * memcheck (no fresh boot, no BAD) and that the shared clone's QEMU maps the image server's image.
 *
 *   capi_libvirt_session_test save URI CKPT DOMAIN      hlt-save libvirt DOMAIN --then destroy (a process of
 *                                                         its own: see main)
 *   capi_libvirt_session_test URI CKPT DISK_DIR IMAGE_DIR STATUS_DIR
 *
 *   - the save (`save`): hlt_libvirt_save_create with HLT_SAVE_CONNECT, the errors of its options, the figures;
 *   - the errors: an unknown kind, a QEMU option on a libvirt session, a resume without a domain name;
 *   - (after the next two, for libvirt's embedded driver: see main) clone "cs1" with memory shared (the image server: the default, libhalite's daemon found beside the library): start
 *     returns with the guest running, wait for the end, the figures, the events (QEMU maps the image), the domain's
 *     name and UUID, the status file "completed";
 *   - clone "cr1" restored lazily (loader slowed down to 2 MiB/s) by this program run again as a child
 *     (`lazy-child`: a process of its own, as a broker's worker) that is SIGKILLed once its status file says
 *     "running"; a session with HLT_SESSION_RESUME and domain "cr1" takes the restore over: resumed, every page in;
 *     a second resume finds nothing to take over.
 * Compiled as C99, linked to libhalite.so. $HALITE_RUN_DIR (the resume records) is the driver's. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capi_test_util.h"
#include "halite/halite_c.h"

static const char *uri, *ckpt, *disk_dir, *image_dir, *status_dir;

static void SleepMs(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

static uint64_t Stat(const hlt_session* s, hlt_session_stat stat) {
  uint64_t v = UINT64_MAX;
  ExpectRc(hlt_session_get_stat(s, stat, &v), HLT_OK, "hlt_session_get_stat");
  return v;
}

/* The file's text (at most size - 1 bytes); "" when it cannot be read. */
static const char* ReadText(const char* path, char* buf, size_t size) {
  buf[0] = '\0';
  FILE* f = fopen(path, "r");
  if (!f) return buf;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static hlt_session* CloneSession(const char* name) {
  hlt_session* s;
  ExpectRc(hlt_session_create(HLT_SESSION_LIBVIRT, ckpt, &s), HLT_OK, "hlt_session_create libvirt");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_CONNECT, uri), HLT_OK, "connect");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_CLONE, 1), HLT_OK, "clone");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_DOMAIN_NAME, name), HLT_OK, "name");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_DISK_DIR, disk_dir), HLT_OK, "disk dir");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_STATUS_FILE, PathIn(status_dir, name)), HLT_OK, "status file");
  return s;
}

/* Every event queued so far; fails unless one of kind `want` holds `needle` (NULL: any text). Returns the kind of
 * the last one. */
static hlt_event_kind DrainEvents(hlt_session* s, hlt_event_kind want, const char* needle, const char* what) {
  hlt_event_kind kind = HLT_EVENT_NOTICE, last = HLT_EVENT_NOTICE;
  const char* text;
  int found = 0, count = 0;
  while (hlt_session_next_event(s, 0, &kind, &text) == HLT_OK) {
    printf("  event %d: %s\n", (int)kind, text);
    if (kind == want && (!needle || strstr(text, needle))) found = 1;
    last = kind;
    ++count;
  }
  Expect(count > 0, "the session reported events");
  Expect(found, what);
  return last;
}

static void Errors(void) {
  hlt_session* s;
  ExpectRc(hlt_session_create((hlt_session_kind)9, ckpt, &s), HLT_EINVAL, "an unknown kind");
  ExpectRc(hlt_session_create(HLT_SESSION_LIBVIRT, ckpt, &s), HLT_OK, "create");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_QEMU_DIR, "/tmp/x"), HLT_EINVAL, "a QEMU option");
  ExpectLastErrorHas("HLT_SESSION_QEMU sessions", "the error says whose option it is");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_CLONE, 2), HLT_EINVAL, "clone 2");
  const char *name, *uuid;
  ExpectRc(hlt_session_get_domain(s, &name, &uuid), HLT_ENOTFOUND, "no domain before the start");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_RESUME, 1), HLT_OK, "resume");
  ExpectRc(hlt_session_start(s), HLT_EINVAL, "a resume without a domain");
  printf("resume without a domain: %s\n", hlt_last_error());
  ExpectLastErrorHas("HLT_SESSION_DOMAIN_NAME", "the error names the missing option");
  Expect(Stat(s, HLT_SESSION_STAT_STATE) == HLT_SESSION_STATE_FAILED, "a failed start leaves the session failed");
  hlt_session_destroy(s);
  ExpectRc(hlt_session_create(HLT_SESSION_QEMU, ckpt, &s), HLT_OK, "create QEMU");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_CLONE, 1), HLT_EINVAL, "clone on a QEMU session");
  ExpectRc(hlt_session_get_domain(s, &name, &uuid), HLT_EINVAL, "no domain of a QEMU session");
  hlt_session_destroy(s);
}

static void SharedClone(void) {
  char text[4096];
  hlt_session* s = CloneSession("cs1");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_MEMORY_SHARED, 1), HLT_OK, "memory shared");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_IMAGE_DIR, image_dir), HLT_OK, "image dir");
  ExpectRc(hlt_session_start(s), HLT_OK, "the shared clone starts");
  uint64_t state = Stat(s, HLT_SESSION_STAT_STATE);
  Expect(state == HLT_SESSION_STATE_RUNNING || state == HLT_SESSION_STATE_DONE, "start returns with the guest running");
  Expect(Stat(s, HLT_SESSION_STAT_RUNNING_US) > 0, "the time to running is known once start returned");
  ExpectRc(hlt_session_wait(s, 300000), HLT_OK, "the shared clone's restore ends");
  Expect(Stat(s, HLT_SESSION_STAT_STATE) == HLT_SESSION_STATE_DONE, "done");
  uint64_t running = Stat(s, HLT_SESSION_STAT_RUNNING_US), done = Stat(s, HLT_SESSION_STAT_DONE_US);
  uint64_t pages = Stat(s, HLT_SESSION_STAT_PAGES_SENT), bytes = Stat(s, HLT_SESSION_STAT_BYTES_READ);
  printf("shared clone cs1: running after %llu us, done after %llu us; %llu pages sent (pc.ram is mapped), %llu "
         "checkpoint bytes read\n", (unsigned long long)running, (unsigned long long)done, (unsigned long long)pages,
         (unsigned long long)bytes);
  Expect(running > 0 && done > 0, "the times to running and to done are known"); /* eager: done is the load's end */
  Expect(pages > 0 && bytes > 0, "the device state and the other regions were sent");
  Expect(Stat(s, HLT_SESSION_STAT_RESUMED) == 0, "not a resume");
  const char *name, *uuid;
  ExpectRc(hlt_session_get_domain(s, &name, &uuid), HLT_OK, "the domain");
  printf("domain %s uuid %s\n", name, uuid);
  Expect(strcmp(name, "cs1") == 0 && strlen(uuid) == 36, "the clone's name and a UUID");
  Expect(DrainEvents(s, HLT_EVENT_NOTICE, "as its guest RAM", "QEMU maps the image (a notice says so)") ==
             HLT_EVENT_DONE, "the last event is DONE");
  ReadText(PathIn(status_dir, "cs1"), text, sizeof text);
  printf("status file: %s", text);
  Expect(strstr(text, "\"state\":\"completed\"") && strstr(text, uuid), "the status file says completed, with the UUID");
  ExpectRc(hlt_session_detach(s), HLT_OK, "detach");
  Expect(Stat(s, HLT_SESSION_STAT_STATE) == HLT_SESSION_STATE_DETACHED, "detached");
  hlt_session_destroy(s);
}

/* `lazy-child`: the restore that gets killed. */
static int LazyChild(void) {
  hlt_session* s = CloneSession("cr1");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_LOADER_RATE, 2 << 20), HLT_OK, "a slow loader");
  ExpectRc(hlt_session_start(s), HLT_OK, "the lazy clone starts");
  printf("child: cr1 running after %llu us; waits to be killed\n",
         (unsigned long long)Stat(s, HLT_SESSION_STAT_RUNNING_US));
  fflush(stdout);
  for (;;) pause(); /* killed here, mid-restore */
  return 1;
}

static int DirEntries(const char* path) {
  DIR* d = opendir(path);
  if (!d) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static void KillLazyRestore(const char* self) {
  char text[4096];
  const char* status = PathIn(status_dir, "cr1");
  pid_t child = fork();
  Expect(child >= 0, "fork");
  if (child == 0) {
    execl(self, self, "lazy-child", uri, ckpt, disk_dir, image_dir, status_dir, (char*)NULL);
    _exit(127);
  }
  int running = 0, exited = 0, wstatus = 0;
  for (int i = 0; i < 2400 && !running && !exited; ++i, SleepMs(50)) {
    running = strstr(ReadText(status, text, sizeof text), "\"state\":\"running\"") != NULL;
    exited = waitpid(child, &wstatus, WNOHANG) == child;
  }
  if (!running || exited) {
    if (!exited) kill(child, SIGKILL), waitpid(child, NULL, 0);
    printf("FAIL: the lazy restore never ran (exited %d, status 0x%x): %s\n", exited, wstatus, text);
    exit(1);
  }
  SleepMs(1000); /* mid-restore: 2 MiB/s leaves most of the 256 MiB guest to load */
  Expect(waitpid(child, &wstatus, WNOHANG) == 0, "the lazy restore still goes on when it is killed");
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  printf("lazy restore of cr1 SIGKILLed (pid %d) 1 s after its status file said running\n", (int)child);
  Expect(DirEntries(getenv("HALITE_RUN_DIR")) == 1, "the killed restore left its record");
}

static void Resume(void) {
  hlt_session* s;
  ExpectRc(hlt_session_create(HLT_SESSION_LIBVIRT, ckpt, &s), HLT_OK, "create the resume");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_CONNECT, uri), HLT_OK, "connect");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_RESUME, 1), HLT_OK, "resume");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_DOMAIN_NAME, "cr1"), HLT_OK, "the domain");
  ExpectRc(hlt_session_start(s), HLT_OK, "the resume starts");
  ExpectRc(hlt_session_wait(s, 300000), HLT_OK, "the resumed restore ends");
  Expect(Stat(s, HLT_SESSION_STAT_RESUMED) == 1, "the session says it resumed");
  uint64_t pages = Stat(s, HLT_SESSION_STAT_PAGES_SENT), bytes = Stat(s, HLT_SESSION_STAT_BYTES_READ);
  printf("resumed restore of cr1: guest resumed after %llu us, every page in after %llu us; %llu pages sent, %llu "
         "checkpoint bytes read\n", (unsigned long long)Stat(s, HLT_SESSION_STAT_RUNNING_US),
         (unsigned long long)Stat(s, HLT_SESSION_STAT_DONE_US), (unsigned long long)pages, (unsigned long long)bytes);
  Expect(pages > 0 && bytes > 0, "the resume sent the pages the killed restore had not");
  DrainEvents(s, HLT_EVENT_NOTICE, "resuming the restore of", "a notice says what is resumed");
  const char *name, *uuid;
  ExpectRc(hlt_session_get_domain(s, &name, &uuid), HLT_OK, "the domain");
  Expect(strcmp(name, "cr1") == 0, "the resumed domain");
  Expect(DirEntries(getenv("HALITE_RUN_DIR")) == 0, "the record is gone once the resume completed");
  hlt_session_destroy(s);

  ExpectRc(hlt_session_create(HLT_SESSION_LIBVIRT, ckpt, &s), HLT_OK, "create a second resume");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_CONNECT, uri), HLT_OK, "connect");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_RESUME, 1), HLT_OK, "resume");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_DOMAIN_NAME, "cr1"), HLT_OK, "the domain");
  Expect(hlt_session_start(s) != HLT_OK, "nothing left to resume");
  printf("a second resume: %s\n", hlt_last_error());
  hlt_session_destroy(s);
}

/* `save URI CKPT DOMAIN`: hlt-save libvirt DOMAIN -o CKPT --connect URI --then destroy. */
static int Save(const char* domain) {
  hlt_writer* w;
  hlt_save* s;
  ExpectRc(hlt_writer_create(ckpt, &w), HLT_OK, "writer");
  ExpectRc(hlt_libvirt_save_create(w, "", &s), HLT_EINVAL, "an empty domain name");
  ExpectRc(hlt_libvirt_save_create(w, domain, &s), HLT_OK, "hlt_libvirt_save_create");
  ExpectRc(hlt_save_set_param(s, HLT_SAVE_THEN, HLT_SAVE_THEN_QUIT), HLT_EINVAL, "quit is QEMU's");
  ExpectLastErrorHas("_DESTROY", "the error says what a libvirt save takes");
  ExpectRc(hlt_save_set_param(s, HLT_SAVE_THEN, HLT_SAVE_THEN_DESTROY), HLT_OK, "then destroy");
  ExpectRc(hlt_save_set_string(s, HLT_SAVE_CONNECT, uri), HLT_OK, "connect");
  ExpectRc(hlt_save_get_stat(s, HLT_SAVE_STAT_DATA_PAGES, &(uint64_t){0}), HLT_EINVAL, "a statistic before run");
  ExpectRc(hlt_save_run(s), HLT_OK, "hlt_save_run");
  uint64_t blocks = 0, pages = 0, zero = 0, total = 0;
  ExpectRc(hlt_save_get_stat(s, HLT_SAVE_STAT_RAMBLOCKS, &blocks), HLT_OK, "ramblocks");
  ExpectRc(hlt_save_get_stat(s, HLT_SAVE_STAT_DATA_PAGES, &pages), HLT_OK, "data pages");
  ExpectRc(hlt_save_get_stat(s, HLT_SAVE_STAT_ZERO_PAGES, &zero), HLT_OK, "zero pages");
  ExpectRc(hlt_save_get_stat(s, HLT_SAVE_STAT_TOTAL_US, &total), HLT_OK, "total");
  printf("saved domain %s: %llu regions, %llu data pages, %llu zero pages, %llu us\n", domain,
         (unsigned long long)blocks, (unsigned long long)pages, (unsigned long long)zero, (unsigned long long)total);
  Expect(blocks > 0 && pages > 0 && pages + zero >= 65536, "every page of the 256 MiB guest saved");
  ExpectRc(hlt_save_run(s), HLT_EINVAL, "a second run");
  hlt_save_free(s);
  hlt_writer_free(w);
  hlt_reader* r;
  ExpectRc(hlt_reader_open(ckpt, &r), HLT_OK, "the checkpoint opens");
  hlt_reader_close(r);
  printf("capi libvirt save: OK\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "save") == 0) {
    uri = argv[2], ckpt = argv[3];
    return Save(argv[4]);
  }
  if (argc != 7 && argc != 6) {
    fprintf(stderr, "usage: %s [lazy-child] URI CKPT DISK_DIR IMAGE_DIR STATUS_DIR\n", argv[0]);
    return 2;
  }
  const int child = argc == 7 && strcmp(argv[1], "lazy-child") == 0;
  char** a = argv + (argc - 5);
  uri = a[0], ckpt = a[1], disk_dir = a[2], image_dir = a[3], status_dir = a[4];
  if (child) return LazyChild();
  Expect(getenv("HALITE_RUN_DIR") != NULL, "HALITE_RUN_DIR set by the driver");
  setvbuf(stdout, NULL, _IOLBF, 0);
  Errors();
  /* The killed restore first: libvirt's embedded driver, once a process connected, holds its root's pid lock until
   * that process exits, so the child must connect before this process does. */
  KillLazyRestore("/proc/self/exe");
  Resume();
  SharedClone();
  printf("capi libvirt session: OK\n");
  return 0;
}
