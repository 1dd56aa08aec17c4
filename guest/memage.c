// memage: ages the test guest's memory before its workload, so that physical memory is fragmented as on a desktop
// that has run for days (issue 17's aged guest).
//
// A freshly booted guest hands a new process physically contiguous free memory, so a workload's pages end up in
// physical order and a checkpoint laid out in physical order looks as good as one laid out by locality. memage runs
// --procs worker processes for --seconds: each keeps a changing set of anonymous allocations (4 KiB to 8 MiB,
// log-uniform, up to its share of --mib), touching every page of what it allocates and freeing allocations at
// random; after a random number of rounds a worker exits and a new one takes its place (new address spaces, memory
// returned in the order the kernel frees it). One more worker plays the page cache: it writes files of random sizes
// under --dir (the initramfs's RAM-backed root: file pages) and deletes them at random. When the time is up, the
// workers still alive stay resident (as a desktop's long-running processes), each keeping a random quarter of its
// pages and unmapping the rest page by page, and the files written last stay: the memory freed around what stays
// cannot merge back into large free blocks, so the workload that starts next gets frames scattered all over
// physical memory. With --free-all every worker exits and every file goes instead.
//
//   memage [--seconds S] [--mib M] [--procs P] [--seed X] [--dir D] [--free-all]
// --mib 0 (the default) ages 60% of the memory available when it starts. Prints "memage start ..." and
// "memage done processes=<workers started> resident=<workers kept> mib=... t_ms=..." on stdout.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kPage = 4096, kMaxHeld = 4096 };

struct Options {
  uint64_t seconds, mib, procs, seed;
  const char* dir;
  int keep;  // the workers alive at the end stay resident and the files stay (else all is freed)
};

static uint64_t SplitMix(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t NowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

// 4 KiB .. 8 MiB, log-uniform, in pages.
static uint64_t RandomPages(uint64_t* rng) {
  const unsigned order = (unsigned)(SplitMix(rng) % 12);  // 2^0 .. 2^11 pages
  const uint64_t base = (uint64_t)1 << order;
  return base + SplitMix(rng) % base;
}

struct Held {
  uint8_t* p;
  uint64_t pages;
};

// One worker's life: allocate, touch, free at random, for `rounds` rounds or until the deadline.
static uint64_t Work(uint64_t seed, uint64_t budget_pages, uint64_t rounds, uint64_t deadline_ms, int resident_fd) {
  static struct Held held[kMaxHeld];
  size_t n = 0;
  uint64_t used = 0, done = 0, rng = seed;
  for (; done < rounds && NowMs() < deadline_ms; ++done) {
    const int allocate = n == 0 || (n < kMaxHeld && SplitMix(&rng) % 100 < 60);
    if (allocate) {
      uint64_t pages = RandomPages(&rng);
      while (used + pages > budget_pages && n > 0) {  // over budget: free a random one first
        const size_t k = (size_t)(SplitMix(&rng) % n);
        munmap(held[k].p, held[k].pages * kPage);
        used -= held[k].pages;
        held[k] = held[--n];
      }
      if (pages > budget_pages) pages = budget_pages;
      uint8_t* p = mmap(NULL, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) continue;
      madvise(p, pages * kPage, MADV_NOHUGEPAGE);  // 4 KiB frames, as a long-running desktop's heaps mostly are
      for (uint64_t i = 0; i < pages; ++i) memset(p + i * kPage, (int)(i + seed), 64);
      held[n].p = p;
      held[n].pages = pages;
      ++n;
      used += pages;
    } else {
      const size_t k = (size_t)(SplitMix(&rng) % n);
      munmap(held[k].p, held[k].pages * kPage);
      used -= held[k].pages;
      held[k] = held[--n];
    }
  }
  if (resident_fd >= 0 && NowMs() >= deadline_ms) {
    // Time is up while this worker lives: it stays, as a desktop's long-running processes do, keeping a random
    // quarter of its pages (the rest unmapped page by page), so the memory freed around them cannot merge back
    // into large free blocks.
    for (size_t k = 0; k < n; ++k) {
      for (uint64_t i = 0; i < held[k].pages; ++i) {
        if (SplitMix(&rng) % 4 != 0) munmap(held[k].p + i * kPage, kPage);
      }
    }
    const char ready = 1;
    if (write(resident_fd, &ready, 1) != 1) _exit(1);
    for (;;) pause();
  }
  return done;
}

// The page cache stand-in: files written and deleted at random under dir, at most budget_pages of them at once.
static void PageCache(uint64_t seed, uint64_t budget_pages, const char* dir, uint64_t deadline_ms, int keep_files) {
  enum { kFiles = 256 };
  uint64_t sizes[kFiles] = {0}, used = 0, rng = seed;
  static uint8_t buf[64 * kPage];
  memset(buf, 0x5a, sizeof buf);
  char path[512];
  while (NowMs() < deadline_ms) {
    const unsigned f = (unsigned)(SplitMix(&rng) % kFiles);
    snprintf(path, sizeof path, "%s/memage-%u", dir, f);
    if (sizes[f] != 0) {
      unlink(path);
      used -= sizes[f];
      sizes[f] = 0;
      continue;
    }
    uint64_t pages = RandomPages(&rng);
    if (used + pages > budget_pages) continue;
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) continue;
    uint64_t written = 0;
    while (written < pages) {
      const uint64_t chunk = pages - written < 64 ? pages - written : 64;
      if (write(fd, buf, chunk * kPage) != (ssize_t)(chunk * kPage)) break;
      written += chunk;
    }
    close(fd);
    sizes[f] = written;
    used += written;
  }
  if (!keep_files) {
    for (unsigned f = 0; f < kFiles; ++f) {
      if (sizes[f] == 0) continue;
      snprintf(path, sizeof path, "%s/memage-%u", dir, f);
      unlink(path);
    }
  }
}

// MemAvailable from /proc/meminfo, in MiB (0 when it cannot be read).
static uint64_t AvailableMib(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (f == NULL) return 0;
  char line[256];
  uint64_t kib = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) break;
  }
  fclose(f);
  return kib / 1024;
}

static int ParseU64(const char* s, uint64_t* out) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0') return 0;
  *out = v;
  return 1;
}

int main(int argc, char** argv) {
  struct Options o = {30, 0, 8, 1, "/tmp", 1};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = v != NULL;
    if (strcmp(a, "--seconds") == 0 && ok) {
      ok = ParseU64(v, &o.seconds);
    } else if (strcmp(a, "--mib") == 0 && ok) {
      ok = ParseU64(v, &o.mib);
    } else if (strcmp(a, "--procs") == 0 && ok) {
      ok = ParseU64(v, &o.procs) && o.procs > 0 && o.procs <= 256;
    } else if (strcmp(a, "--seed") == 0 && ok) {
      ok = ParseU64(v, &o.seed);
    } else if (strcmp(a, "--dir") == 0 && ok) {
      o.dir = v;
    } else if (strcmp(a, "--free-all") == 0) {
      o.keep = 0;
      ok = 1;
      --i;  // a flag: no value
    } else {
      ok = 0;
    }
    if (!ok) {
      fprintf(stderr, "usage: memage [--seconds S] [--mib M] [--procs P] [--seed X] [--dir D] [--free-all] (bad: %s)\n",
              a);
      return 2;
    }
    ++i;
  }
  if (o.mib == 0) o.mib = AvailableMib() * 6 / 10;
  if (o.mib == 0) o.mib = 64;
  mkdir(o.dir, 0755);
  const uint64_t t0 = NowMs(), deadline = t0 + o.seconds * 1000;
  const uint64_t total_pages = o.mib * 1024 * 1024 / kPage;
  const uint64_t cache_pages = total_pages / 4, worker_pages = (total_pages - cache_pages) / o.procs;
  printf("memage start seconds=%" PRIu64 " mib=%" PRIu64 " procs=%" PRIu64 " seed=%" PRIu64 "\n", o.seconds, o.mib,
         o.procs, o.seed);
  fflush(stdout);
  uint64_t rng = o.seed, generations = 0;
  int ready_pipe[2];
  if (pipe(ready_pipe) != 0) {
    perror("memage: pipe");
    return 1;
  }
  pid_t cache = fork();
  if (cache == 0) {
    PageCache(SplitMix(&rng), cache_pages, o.dir, deadline, o.keep);
    _exit(0);
  }
  pid_t workers[256];
  for (uint64_t w = 0; w < o.procs; ++w) workers[w] = -1;
  // Keep --procs workers alive until the deadline; each lives a random number of rounds.
  while (NowMs() < deadline) {
    for (uint64_t w = 0; w < o.procs; ++w) {
      if (workers[w] > 0 && waitpid(workers[w], NULL, WNOHANG) == 0) continue;
      const uint64_t seed = SplitMix(&rng), rounds = 20 + SplitMix(&rng) % 300;
      workers[w] = fork();
      if (workers[w] == 0) {
        close(ready_pipe[0]);
        Work(seed, worker_pages, rounds, deadline, o.keep ? ready_pipe[1] : -1);
        _exit(0);
      }
      ++generations;
    }
    usleep(20000);
  }
  // Each worker alive at the deadline either finishes its rounds and exits, or stays resident (it says so on the
  // pipe and never exits): wait for one or the other.
  close(ready_pipe[1]);
  uint64_t resident = 0;
  for (uint64_t w = 0; w < o.procs; ++w) {
    if (workers[w] <= 0) continue;
    for (;;) {
      if (waitpid(workers[w], NULL, WNOHANG) != 0) break;
      struct timeval tv = {0, 20000};
      fd_set fds;
      FD_ZERO(&fds);
      FD_SET(ready_pipe[0], &fds);
      char c;
      if (select(ready_pipe[0] + 1, &fds, NULL, NULL, &tv) > 0 && read(ready_pipe[0], &c, 1) == 1) {
        ++resident;
        break;
      }
    }
  }
  if (cache > 0) waitpid(cache, NULL, 0);
  printf("memage done processes=%" PRIu64 " resident=%" PRIu64 " mib=%" PRIu64 " t_ms=%" PRIu64 "\n", generations,
         resident, o.mib, NowMs() - t0);
  fflush(stdout);
  return 0;
}
