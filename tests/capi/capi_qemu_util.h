/* What the C API's QEMU tests share: find QEMU, launch one with a QMP socket, talk QMP. */
#ifndef HALITE_TESTS_CAPI_QEMU_UTIL_H_
#define HALITE_TESTS_CAPI_QEMU_UTIL_H_

#include <stddef.h>
#include <sys/types.h>

/* The QEMU LaunchQemu started (-1: none). */
extern pid_t qemu_pid;
/* Kills and reaps that QEMU (for atexit). */
void KillQemu(void);
void SleepMs(long ms);
/* $HALITE_QEMU, else qemu-system-x86_64 from /usr/bin, /usr/local/bin or /bin; NULL when there is none. */
const char* QemuBinary(void);
/* Starts a TCG pc guest of `mib` MiB (SeaBIOS, no disk) with its QMP socket at socket_path, and the arguments of
 * the NULL-terminated `extra` (NULL: none); exits 1 on failure. */
void LaunchQemu(const char* binary, const char* socket_path, const char* log_path, int mib,
                const char* const* extra);
/* Waits up to 10 s for that QEMU to exit by itself; 1 when it did. */
int WaitQemuGone(void);
/* QMP's query-status through socket_path ("running", "paused", ...) into status; 1 on success. */
int QmpQueryStatus(const char* socket_path, char* status, size_t cap);
/* 1 when pid has exited (reaped here, gone, or a zombie). */
int ProcessGone(pid_t pid);
/* SIGKILLs pid and waits up to 10 s until it is gone; 1 when it is. */
int KillAndWaitGone(pid_t pid);

#endif
