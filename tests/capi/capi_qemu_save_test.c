/* hlt-save qemu through the C API (hlt_qemu_save_create): a real QEMU (TCG, 64 MiB, SeaBIOS running) saved over its
 * QMP socket with --then quit, then checked through the reader: the regions, the device state blob, every
 * checksum. And the error for a socket nobody listens on, naming it. Compiled as C99, linked to libhalite.so.
 * Exit 77 (skipped) without qemu-system-x86_64 (HALITE_QEMU names another binary). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capi_test_util.h"
#include "halite/halite_c.h"

static pid_t qemu_pid = -1;

static void KillQemu(void) {
  if (qemu_pid > 0) {
    kill(qemu_pid, SIGKILL);
    waitpid(qemu_pid, NULL, 0);
    qemu_pid = -1;
  }
}

static void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static const char* QemuBinary(void) {
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

static void LaunchQemu(const char* binary, const char* socket_path, const char* log_path) {
  char qmp[700];
  snprintf(qmp, sizeof qmp, "unix:%s,server=on,wait=off", socket_path);
  qemu_pid = fork();
  Expect(qemu_pid >= 0, "fork");
  if (qemu_pid == 0) {
    FILE* log = freopen(log_path, "w", stderr);
    (void)log;
    execl(binary, binary, "-machine", "pc", "-m", "64M", "-accel", "tcg", "-cpu", "qemu64", "-nodefaults",
          "-display", "none", "-qmp", qmp, (char*)NULL);
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
static int WaitQemuGone(void) {
  for (int i = 0; i < 200; ++i) {
    if (waitpid(qemu_pid, NULL, WNOHANG) == qemu_pid) {
      qemu_pid = -1;
      return 1;
    }
    SleepMs(50);
  }
  return 0;
}

static uint64_t SaveStat(const hlt_save* s, hlt_save_stat stat) {
  uint64_t v = UINT64_MAX;
  ExpectRc(hlt_save_get_stat(s, stat, &v), HLT_OK, "hlt_save_get_stat");
  return v;
}

static void CheckCheckpoint(const char* path, uint64_t pages_saved) {
  hlt_reader* r;
  ExpectRc(hlt_reader_open(path, &r), HLT_OK, "open the saved checkpoint");
  uint64_t pages = 0, vmm = 0;
  ExpectRc(hlt_reader_get_info(r, HLT_INFO_PAGES, &pages), HLT_OK, "info pages");
  ExpectRc(hlt_reader_get_info(r, HLT_INFO_VMM_KIND, &vmm), HLT_OK, "info vmm kind");
  Expect(pages == pages_saved, "the reader sees the pages the writer counted");
  Expect(vmm == 1, "recorded as a QEMU checkpoint");
  int found_ram = 0;
  for (uint32_t i = 0; i < hlt_reader_region_count(r); ++i) {
    const char* name;
    uint64_t base, size;
    ExpectRc(hlt_reader_region(r, i, &name, &base, &size), HLT_OK, "region");
    if (strcmp(name, "pc.ram") == 0 && size == 64u << 20) found_ram = 1;
  }
  Expect(found_ram, "a 64 MiB region pc.ram");
  void* state;
  size_t state_len;
  ExpectRc(hlt_reader_read_blob(r, "qemu.state", &state, &state_len), HLT_OK, "the qemu.state blob");
  Expect(state_len > 1000, "QEMU's device state is in the blob");
  hlt_free(state);
  ExpectRc(hlt_reader_verify(r, NULL, NULL), HLT_OK, "verify the saved checkpoint");
  hlt_reader_close(r);
}

int main(void) {
  const char* qemu = QemuBinary();
  if (!qemu) {
    printf("SKIPPED: no qemu-system-x86_64 (install qemu-system-x86 or set HALITE_QEMU)\n");
    return 77;
  }
  atexit(KillQemu);
  const char* dir = ScratchDir();
  char socket_path[600], log_path[600], ckpt[600];
  snprintf(socket_path, sizeof socket_path, "%s", PathIn(dir, "qmp.sock"));
  snprintf(log_path, sizeof log_path, "%s", PathIn(dir, "qemu.log"));
  snprintf(ckpt, sizeof ckpt, "%s", PathIn(dir, "vm.hlt"));

  /* Nobody listens: the error names the socket, as hlt-save qemu prints it; nothing is written. */
  hlt_writer* w;
  hlt_save* s;
  ExpectRc(hlt_writer_create(ckpt, &w), HLT_OK, "writer");
  ExpectRc(hlt_qemu_save_create(w, PathIn(dir, "nobody.sock"), &s), HLT_OK, "save to nobody");
  ExpectRc(hlt_save_set_param(s, HLT_SAVE_TIMEOUT_MS, 300), HLT_OK, "timeout");
  ExpectRc(hlt_save_set_param(s, HLT_SAVE_THEN, 7), HLT_EINVAL, "then 7");
  Expect(hlt_save_run(s) != HLT_OK, "a save to a socket nobody listens on fails");
  ExpectLastErrorHas("nobody.sock", "the socket is named");
  printf("no QEMU: %s\n", hlt_last_error());
  ExpectRc(hlt_save_run(s), HLT_EINVAL, "a second run");
  hlt_save_free(s);
  hlt_writer_free(w);
  Expect(access(ckpt, F_OK) != 0, "a failed save leaves no checkpoint");

  LaunchQemu(qemu, socket_path, log_path);
  SleepMs(300); /* SeaBIOS runs a little */
  ExpectRc(hlt_writer_create(ckpt, &w), HLT_OK, "writer");
  ExpectRc(hlt_writer_set_param(w, HLT_WRITER_THREADS, 2), HLT_OK, "threads");
  ExpectRc(hlt_qemu_save_create(w, socket_path, &s), HLT_OK, "hlt_qemu_save_create");
  ExpectRc(hlt_save_get_stat(s, HLT_SAVE_STAT_RAMBLOCKS, &(uint64_t){0}), HLT_EINVAL, "a statistic before run");
  ExpectRc(hlt_save_set_param(s, HLT_SAVE_THEN, HLT_SAVE_THEN_QUIT), HLT_OK, "then quit");
  ExpectRc(hlt_save_run(s), HLT_OK, "hlt_save_run");
  uint64_t pages = 0, file_bytes = 0;
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_PAGES, &pages), HLT_OK, "writer pages");
  ExpectRc(hlt_writer_get_stat(w, HLT_WRITER_STAT_FILE_BYTES, &file_bytes), HLT_OK, "writer file bytes");
  printf("saved: %llu RAMBlocks, %llu data pages, %llu zero pages, stream %llu bytes in %llu us, state blob %llu "
         "bytes; checkpoint %llu pages in %llu bytes\n",
         (unsigned long long)SaveStat(s, HLT_SAVE_STAT_RAMBLOCKS), (unsigned long long)SaveStat(s, HLT_SAVE_STAT_DATA_PAGES),
         (unsigned long long)SaveStat(s, HLT_SAVE_STAT_ZERO_PAGES), (unsigned long long)SaveStat(s, HLT_SAVE_STAT_STREAM_BYTES),
         (unsigned long long)SaveStat(s, HLT_SAVE_STAT_STREAM_US), (unsigned long long)SaveStat(s, HLT_SAVE_STAT_STATE_BLOB_BYTES),
         (unsigned long long)pages, (unsigned long long)file_bytes);
  Expect(SaveStat(s, HLT_SAVE_STAT_RAMBLOCKS) >= 1 && SaveStat(s, HLT_SAVE_STAT_DATA_PAGES) > 0, "QEMU sent pages");
  Expect(pages >= (64u << 20) / HLT_PAGE_SIZE, "at least the 64 MiB of pc.ram");
  hlt_save_free(s);
  hlt_writer_free(w);
  Expect(WaitQemuGone(), "QEMU quits after a save with HLT_SAVE_THEN_QUIT");
  CheckCheckpoint(ckpt, pages);
  RemoveScratch();
  printf("capi qemu save: OK\n");
  return 0;
}
