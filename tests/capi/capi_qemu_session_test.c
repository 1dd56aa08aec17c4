/* hlt-restore qemu through the C API (hlt_session_*), against a real QEMU (TCG, 64 MiB, SeaBIOS running): a guest
 * saved with hlt_qemu_save_create, then
 *   - restored lazily into a QEMU the session launches (hlt_session_add_qemu_arg): start returns with the guest
 *     running, wait for every page, the figures and events, detach, QMP query-status says "running";
 *   - restored eagerly with the guest left paused: start returns with every page in, query-status "paused";
 *   - attach mode (HLT_SESSION_QMP_SOCKET) into a QEMU started here with -incoming defer;
 *   - a session destroyed while its restore goes on: a wait that times out, detach refused, its QEMU killed;
 *   - a lazy restore (loader slowed down to 256 KiB/s) in a child process that is SIGKILLed once its guest runs,
 *     taken over by a session with HLT_SESSION_RESUME and the same QEMU directory: resumed, every page in, the
 *     guest running;
 *   - the errors: no QEMU arguments nor socket, a missing checkpoint, an unknown kind.
 * Compiled as C99, linked to libhalite.so. Exit 77 (skipped) without qemu-system-x86_64. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capi_qemu_util.h"
#include "capi_test_util.h"
#include "halite/halite_c.h"

static const char* qemu;
static pid_t session_qemus[8];
static int session_qemu_count;

/* QEMUs the sessions launched: killed on the way out, also when a check fails. */
static void Track(pid_t pid) {
  if (session_qemu_count < 8) session_qemus[session_qemu_count++] = pid;
}
static void KillSessionQemus(void) {
  for (int i = 0; i < session_qemu_count; ++i) {
    if (!ProcessGone(session_qemus[i])) KillAndWaitGone(session_qemus[i]);
  }
}
static const char* const kGuestArgs[] = {"-machine", "pc", "-m", "64M", "-accel", "tcg", "-cpu", "qemu64",
                                         "-nodefaults", "-display", "none"};

static uint64_t Stat(const hlt_session* s, hlt_session_stat stat) {
  uint64_t v = UINT64_MAX;
  ExpectRc(hlt_session_get_stat(s, stat, &v), HLT_OK, "hlt_session_get_stat");
  return v;
}

static hlt_session* LaunchSession(const char* ckpt, const char* qemu_dir) {
  hlt_session* s;
  ExpectRc(hlt_session_create(HLT_SESSION_QEMU, ckpt, &s), HLT_OK, "hlt_session_create");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_QEMU_BINARY, qemu), HLT_OK, "QEMU binary");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_QEMU_DIR, qemu_dir), HLT_OK, "QEMU dir");
  for (size_t i = 0; i < sizeof kGuestArgs / sizeof kGuestArgs[0]; ++i) {
    ExpectRc(hlt_session_add_qemu_arg(s, kGuestArgs[i]), HLT_OK, "QEMU argument");
  }
  return s;
}

static void SaveGuest(const char* dir, const char* ckpt) {
  char socket_path[600], log_path[600];
  snprintf(socket_path, sizeof socket_path, "%s", PathIn(dir, "save-qmp.sock"));
  snprintf(log_path, sizeof log_path, "%s", PathIn(dir, "save-qemu.log"));
  /* 8 MiB that do not compress, put in guest RAM at 16 MiB by QEMU's loader device: a checkpoint of many blocks,
   * so that a slowed-down loader leaves the first restore of ResumeKilledRestore unfinished when it is killed. */
  static unsigned char data[8u << 20];
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (size_t i = 0; i < sizeof data; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    data[i] = (unsigned char)x;
  }
  char device[700];
  const char* extra[] = {"-device", device, NULL};
  WriteFile(PathIn(dir, "data.bin"), data, sizeof data);
  snprintf(device, sizeof device, "loader,file=%s,addr=0x1000000,force-raw=on", PathIn(dir, "data.bin"));
  LaunchQemu(qemu, socket_path, log_path, 64, extra);
  /* SeaBIOS done with its POST (its fw_cfg DMA into guest RAM holds QEMU's global lock: a restore killed while
   * that waits for a page leaves a monitor that cannot answer the resume), idle in its boot retry. */
  SleepMs(3000);
  hlt_writer* w;
  hlt_save* sv;
  ExpectRc(hlt_writer_create(ckpt, &w), HLT_OK, "writer");
  ExpectRc(hlt_qemu_save_create(w, socket_path, &sv), HLT_OK, "hlt_qemu_save_create");
  ExpectRc(hlt_save_set_param(sv, HLT_SAVE_THEN, HLT_SAVE_THEN_QUIT), HLT_OK, "then quit");
  ExpectRc(hlt_save_run(sv), HLT_OK, "hlt_save_run");
  hlt_save_free(sv);
  hlt_writer_free(w);
  Expect(WaitQemuGone(), "the saved QEMU quits");
}

static void ExpectGuestStatus(const char* qemu_dir, const char* want, const char* what) {
  char status[64] = "";
  Expect(QmpQueryStatus(PathIn(qemu_dir, "qmp.sock"), status, sizeof status), "QMP query-status answers");
  printf("%s: query-status %s\n", what, status);
  Expect(strcmp(status, want) == 0, what);
}

static void ExpectGuestRunning(const char* qemu_dir, const char* what) { ExpectGuestStatus(qemu_dir, "running", what); }

static void Errors(const char* dir, const char* ckpt) {
  hlt_session* s;
  ExpectRc(hlt_session_create((hlt_session_kind)9, ckpt, &s), HLT_EINVAL, "an unknown kind");
  ExpectRc(hlt_session_create(HLT_SESSION_QEMU, ckpt, &s), HLT_OK, "create");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_EAGER, 2), HLT_EINVAL, "eager 2");
  Expect(hlt_session_start(s) != HLT_OK, "neither QEMU arguments nor a QMP socket");
  printf("no QEMU: %s\n", hlt_last_error());
  ExpectLastErrorHas("--qmp", "the error says what is missing, as hlt-restore qemu does");
  Expect(Stat(s, HLT_SESSION_STAT_STATE) == HLT_SESSION_STATE_FAILED, "a failed start leaves the session failed");
  ExpectRc(hlt_session_start(s), HLT_EINVAL, "a second start");
  ExpectRc(hlt_session_detach(s), HLT_EINVAL, "detach without a started restore");
  hlt_session_destroy(s);

  s = LaunchSession(PathIn(dir, "missing.hlt"), PathIn(dir, "q-missing"));
  Expect(hlt_session_start(s) != HLT_OK, "a missing checkpoint");
  printf("missing checkpoint: %s\n", hlt_last_error());
  ExpectLastErrorHas("missing.hlt", "the checkpoint is named");
  hlt_session_destroy(s);
}

static void LazyRestore(const char* dir, const char* ckpt) {
  const char* qdir = PathIn(dir, "q-lazy");
  hlt_session* s = LaunchSession(ckpt, qdir);
  ExpectRc(hlt_session_get_stat(s, HLT_SESSION_STAT_STATE, &(uint64_t){9}), HLT_OK, "state before start");
  ExpectRc(hlt_session_start(s), HLT_OK, "hlt_session_start");
  uint64_t state = Stat(s, HLT_SESSION_STAT_STATE);
  Expect(state == HLT_SESSION_STATE_RUNNING || state == HLT_SESSION_STATE_DONE, "the guest runs after start");
  Expect(Stat(s, HLT_SESSION_STAT_RUNNING_US) > 0, "the time to running is known after start");
  pid_t pid = (pid_t)Stat(s, HLT_SESSION_STAT_QEMU_PID);
  Track(pid);
  Expect(pid > 0 && kill(pid, 0) == 0, "the launched QEMU is alive");
  ExpectRc(hlt_session_wait(s, -1), HLT_OK, "hlt_session_wait");
  Expect(Stat(s, HLT_SESSION_STAT_STATE) == HLT_SESSION_STATE_DONE, "done after wait");
  Expect(Stat(s, HLT_SESSION_STAT_RESUMED) == 0, "not a resumed restore");
  uint64_t running = Stat(s, HLT_SESSION_STAT_RUNNING_US), done = Stat(s, HLT_SESSION_STAT_DONE_US);
  uint64_t pages = Stat(s, HLT_SESSION_STAT_PAGES_SENT), bytes = Stat(s, HLT_SESSION_STAT_BYTES_READ);
  uint64_t faults = Stat(s, HLT_SESSION_STAT_FAULTS), requests = Stat(s, HLT_SESSION_STAT_REQUESTS);
  printf("lazy restore: running after %llu us, every page in after %llu us, %llu pages sent, %llu checkpoint bytes "
         "read, %llu blocking faults, %llu requests\n",
         (unsigned long long)running, (unsigned long long)done, (unsigned long long)pages,
         (unsigned long long)bytes, (unsigned long long)faults, (unsigned long long)requests);
  Expect(done >= running, "every page in after the guest ran");
  Expect(pages > 0 && bytes > 0, "pages went from the checkpoint to QEMU");
  int saw_running = 0, saw_done = 0;
  hlt_event_kind kind;
  const char* text;
  while (hlt_session_next_event(s, 0, &kind, &text) == HLT_OK) {
    printf("  event %d: %s\n", (int)kind, text);
    saw_running |= kind == HLT_EVENT_RUNNING;
    saw_done |= kind == HLT_EVENT_DONE;
  }
  Expect(saw_running && saw_done, "events: running, then done");
  ExpectRc(hlt_session_detach(s), HLT_OK, "hlt_session_detach");
  hlt_session_destroy(s);
  Expect(!ProcessGone(pid), "a detached QEMU outlives its session");
  ExpectGuestRunning(qdir, "the restored guest runs");
  Expect(KillAndWaitGone(pid), "QEMU killed");
}

/* --eager with the guest left paused: start returns with every page in. */
static void EagerRestore(const char* dir, const char* ckpt) {
  const char* qdir = PathIn(dir, "q-eager");
  char qdir_copy[600];
  snprintf(qdir_copy, sizeof qdir_copy, "%s", qdir);
  hlt_session* s = LaunchSession(ckpt, qdir_copy);
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_EAGER, 1), HLT_OK, "eager");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_START_PAUSED, 1), HLT_OK, "paused");
  ExpectRc(hlt_session_start(s), HLT_OK, "eager start");
  pid_t pid = (pid_t)Stat(s, HLT_SESSION_STAT_QEMU_PID);
  Track(pid);
  Expect(Stat(s, HLT_SESSION_STAT_STATE) == HLT_SESSION_STATE_DONE, "an eager start returns with every page in");
  ExpectRc(hlt_session_wait(s, 0), HLT_OK, "wait after an eager start");
  uint64_t done = Stat(s, HLT_SESSION_STAT_DONE_US), pages = Stat(s, HLT_SESSION_STAT_PAGES_SENT);
  printf("eager restore: every page in after %llu us, %llu pages sent, %llu requests\n", (unsigned long long)done,
         (unsigned long long)pages, (unsigned long long)Stat(s, HLT_SESSION_STAT_REQUESTS));
  Expect(done > 0 && pages > 0, "pages went to QEMU before the end");
  ExpectRc(hlt_session_detach(s), HLT_OK, "detach");
  hlt_session_destroy(s);
  ExpectGuestStatus(qdir_copy, "paused", "the eagerly restored guest waits paused");
  Expect(KillAndWaitGone(pid), "QEMU killed");
}

/* Attach mode (--qmp): into a QEMU this process started with -incoming defer. */
static void AttachRestore(const char* dir, const char* ckpt) {
  char socket_path[600], log_path[600];
  snprintf(socket_path, sizeof socket_path, "%s", PathIn(dir, "attach-qmp.sock"));
  snprintf(log_path, sizeof log_path, "%s", PathIn(dir, "attach-qemu.log"));
  const char* extra[] = {"-incoming", "defer", NULL};
  LaunchQemu(qemu, socket_path, log_path, 64, extra);
  hlt_session* s;
  ExpectRc(hlt_session_create(HLT_SESSION_QEMU, ckpt, &s), HLT_OK, "create");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_QMP_SOCKET, socket_path), HLT_OK, "QMP socket");
  ExpectRc(hlt_session_start(s), HLT_OK, "attach start");
  ExpectRc(hlt_session_wait(s, -1), HLT_OK, "attach wait");
  Expect((pid_t)Stat(s, HLT_SESSION_STAT_QEMU_PID) == qemu_pid, "the session found the QEMU behind the socket");
  printf("attached restore: running after %llu us, every page in after %llu us\n",
         (unsigned long long)Stat(s, HLT_SESSION_STAT_RUNNING_US),
         (unsigned long long)Stat(s, HLT_SESSION_STAT_DONE_US));
  hlt_session_destroy(s);
  char status[64] = "";
  Expect(QmpQueryStatus(socket_path, status, sizeof status), "QMP query-status answers");
  Expect(strcmp(status, "running") == 0, "the attached guest runs after the session is gone");
  KillQemu();
}

/* Destroyed while the restore goes on (loader slowed down): the launched QEMU, not detached, is killed. */
static void DestroyWhileRestoring(const char* dir, const char* ckpt) {
  hlt_session* s = LaunchSession(ckpt, PathIn(dir, "q-destroy"));
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_LOADER_RATE, 256 * 1024), HLT_OK, "a slow loader");
  ExpectRc(hlt_session_start(s), HLT_OK, "start");
  pid_t pid = (pid_t)Stat(s, HLT_SESSION_STAT_QEMU_PID);
  Track(pid);
  ExpectRc(hlt_session_wait(s, 200), HLT_EABORTED, "a wait that times out while the loader reads");
  Expect(Stat(s, HLT_SESSION_STAT_STATE) == HLT_SESSION_STATE_RUNNING, "running while the loader reads");
  ExpectRc(hlt_session_detach(s), HLT_EINVAL, "detach before the end");
  hlt_session_destroy(s);
  int gone = 0;
  for (int i = 0; i < 100 && !gone; ++i, SleepMs(50)) gone = ProcessGone(pid);
  Expect(gone, "destroying a restoring session kills the QEMU it launched");
  printf("destroyed while restoring: QEMU %d gone\n", (int)pid);
}

/* The first restore, in a child killed once its guest runs: returns QEMU's pid. */
static pid_t KilledRestore(const char* ckpt, const char* qdir) {
  int fds[2];
  Expect(pipe(fds) == 0, "pipe");
  pid_t child = fork();
  Expect(child >= 0, "fork");
  if (child == 0) {
    close(fds[0]);
    hlt_session* s = LaunchSession(ckpt, qdir);
    ExpectRc(hlt_session_set_param(s, HLT_SESSION_LOADER_RATE, 256 * 1024), HLT_OK, "a slow loader");
    ExpectRc(hlt_session_start(s), HLT_OK, "the first start");
    int pid = (int)Stat(s, HLT_SESSION_STAT_QEMU_PID);
    SleepMs(1000); /* the guest's idle loop in: its pages are no longer missing when the kill comes */
    Expect(write(fds[1], &pid, sizeof pid) == (ssize_t)sizeof pid, "pid to the parent");
    for (;;) pause(); /* killed here, mid-restore */
  }
  close(fds[1]);
  int pid = -1;
  ssize_t n = read(fds[0], &pid, sizeof pid);
  close(fds[0]);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  Expect(n == (ssize_t)sizeof pid && pid > 0, "the first restore started its guest");
  return (pid_t)pid;
}

static void ResumeKilledRestore(const char* dir, const char* ckpt) {
  const char* qdir = PathIn(dir, "q-resume");
  char qdir_copy[600];
  snprintf(qdir_copy, sizeof qdir_copy, "%s", qdir);
  pid_t pid = KilledRestore(ckpt, qdir_copy);
  Track(pid);
  printf("first restore killed with its guest running (QEMU %d)\n", (int)pid);
  Expect(access(PathIn(qdir_copy, "halite-restore.json"), F_OK) == 0, "the killed restore left its record");
  hlt_session* s;
  ExpectRc(hlt_session_create(HLT_SESSION_QEMU, ckpt, &s), HLT_OK, "create the resume");
  ExpectRc(hlt_session_set_param(s, HLT_SESSION_RESUME, 1), HLT_OK, "resume");
  ExpectRc(hlt_session_set_string(s, HLT_SESSION_QEMU_DIR, qdir_copy), HLT_OK, "the same QEMU dir");
  ExpectRc(hlt_session_start(s), HLT_OK, "the resume starts");
  ExpectRc(hlt_session_wait(s, -1), HLT_OK, "the resumed restore ends");
  Expect(Stat(s, HLT_SESSION_STAT_RESUMED) == 1, "the session says it resumed");
  Expect((pid_t)Stat(s, HLT_SESSION_STAT_QEMU_PID) == pid, "the same QEMU");
  uint64_t pages = Stat(s, HLT_SESSION_STAT_PAGES_SENT), bytes = Stat(s, HLT_SESSION_STAT_BYTES_READ);
  printf("resumed restore: %llu pages sent, %llu checkpoint bytes read, every page in after %llu us\n",
         (unsigned long long)pages, (unsigned long long)bytes,
         (unsigned long long)Stat(s, HLT_SESSION_STAT_DONE_US));
  Expect(pages > 0, "the resume sent the pages the first restore had not");
  ExpectRc(hlt_session_detach(s), HLT_OK, "detach");
  hlt_session_destroy(s);
  ExpectGuestRunning(qdir_copy, "the resumed guest runs");
  Expect(KillAndWaitGone(pid), "QEMU killed");
}

int main(void) {
  qemu = QemuBinary();
  if (!qemu) {
    printf("SKIPPED: no qemu-system-x86_64 (install qemu-system-x86 or set HALITE_QEMU)\n");
    return 77;
  }
  atexit(KillQemu);
  atexit(KillSessionQemus);
  const char* dir = ScratchDir();
  char ckpt[600], run_dir[600];
  snprintf(ckpt, sizeof ckpt, "%s", PathIn(dir, "vm.hlt"));
  snprintf(run_dir, sizeof run_dir, "%s", PathIn(dir, "run"));
  Expect(mkdir(run_dir, 0700) == 0, "the resume records' directory");
  setenv("HALITE_RUN_DIR", run_dir, 1); /* not /run/halite/restores */
  Errors(dir, ckpt);
  SaveGuest(dir, ckpt);
  LazyRestore(dir, ckpt);
  EagerRestore(dir, ckpt);
  DestroyWhileRestoring(dir, ckpt);
  AttachRestore(dir, ckpt);
  ResumeKilledRestore(dir, ckpt);
  RemoveScratch();
  printf("capi qemu session: OK\n");
  return 0;
}
