// memage: ages the test guest's memory before its workload, so that physical memory is fragmented as on a desktop
// that has run for days (issue 17's aged guest).
//
// A freshly booted guest hands a new process physically contiguous free memory, so a workload's pages end up in
// physical order and a checkpoint laid out in physical order looks as good as one laid out by locality. memage
// ages the guest in two phases.
//
// 1. Churn, --seconds: --procs worker processes each keep a changing set of anonymous allocations (4 KiB to 8 MiB,
//    log-uniform, up to its share of --mib), touching every page of what it allocates and freeing allocations at
//    random; after a random number of rounds a worker exits and a new one takes its place (new address spaces,
//    memory returned in the order the kernel frees it). One more worker plays the page cache: it writes files of
//    random sizes under --dir (the initramfs's RAM-backed root: file pages) and deletes them at random. When the
//    time is up every worker exits; the files written last stay.
// 2. Residents (unless --free-all): --procs long-running processes (a desktop's browser, mail, editor...) start
//    together and fill --fill-pct of the memory then available, in allocations of random sizes; then each frees
//    pages at random, one page at a time and in random order, until all of them together hold --resident-pct of
//    the guest's memory (--resident-mib: that much), and stays, sleeping, for the rest of the guest's life
//    (--resident-seconds S: S seconds, for tests). The pages they keep are spread over physical memory with free
//    single pages between them, and the free pages reach the kernel's free lists in an order unrelated to where
//    they are (as memory freed by many processes at different times does), so the workload that starts next gets
//    frames scattered all over physical memory. The residents free nothing before all are full, so none refills
//    another's holes. With --drop-caches the kernel's clean caches are dropped at the end (echo 3 >
//    /proc/sys/vm/drop_caches; only in the guest: on a host it would drop the host's).
//
//   memage [--seconds S] [--mib M] [--procs P] [--resident-pct R | --resident-mib M] [--fill-pct F | --fill-mib M]
//          [--resident-seconds S] [--seed X] [--dir D] [--free-all] [--drop-caches]
// --mib 0 (the default) churns 60% of the memory available when it starts; --resident-pct defaults to 40,
// --fill-pct to 95. Prints "memage start ...", "memage buddy when=start|churned|done free_mib=.. order0_3_pct=..
// order4_8_pct=.. order9_pct=.." (free memory by the size of the free blocks holding it, from /proc/buddyinfo:
// order 0-3 is up to 32 KiB, order 9 and up 2 MiB and more), "memage resident procs=.. filled_mib=.. kept_mib=..
// rss_mib=<what of their allocations is still in memory, asked of the kernel> total_mib=.." and "memage done
// processes=<workers started> resident=<processes kept> mib=... t_ms=..." on stdout.

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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kPage = 4096, kMaxHeld = 4096, kMaxProcs = 256 };

struct Options {
  uint64_t seconds, mib, procs, seed, resident_pct, fill_pct, resident_mib, fill_mib, resident_seconds;
  const char* dir;
  int keep;         // phase 2 runs and the last files stay (else all is freed)
  int drop_caches;  // echo 3 > /proc/sys/vm/drop_caches at the end
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

// Fills the first 64 bytes of a page with the next words of `rng`. Every page memage writes differs from every
// other: real memory rarely holds the same page twice, and a checkpoint stores identical pages once, so pages
// of equal content would vanish from its layout (and with them the fragmentation this program makes).
static void FillUnique(uint8_t* page, uint64_t* rng) {
  uint64_t words[8];
  for (int w = 0; w < 8; ++w) words[w] = SplitMix(rng);
  memcpy(page, words, sizeof words);
}

// An anonymous mapping of `pages` 4 KiB pages, every page touched with content of its own (`rng`); NULL when
// the kernel refuses.
static uint8_t* AllocateTouched(uint64_t pages, uint64_t* rng) {
  uint8_t* p = mmap(NULL, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  madvise(p, pages * kPage, MADV_NOHUGEPAGE);  // 4 KiB frames, as a long-running desktop's heaps mostly are
  for (uint64_t i = 0; i < pages; ++i) FillUnique(p + i * kPage, rng);
  return p;
}

// Phase 1, one worker's life: allocate, touch, free at random, for `rounds` rounds or until the deadline.
static void Churn(uint64_t seed, uint64_t budget_pages, uint64_t rounds, uint64_t deadline_ms) {
  static struct Held held[kMaxHeld];
  size_t n = 0;
  uint64_t used = 0, rng = seed;
  for (uint64_t done = 0; done < rounds && NowMs() < deadline_ms; ++done) {
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
      uint8_t* p = AllocateTouched(pages, &rng);
      if (p == NULL) continue;
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
}

// The page cache stand-in: files written and deleted at random under dir, at most budget_pages of them at once.
static void PageCache(uint64_t seed, uint64_t budget_pages, const char* dir, uint64_t deadline_ms, int keep_files) {
  enum { kFiles = 256 };
  uint64_t sizes[kFiles] = {0}, used = 0, rng = seed;
  static uint8_t buf[64 * kPage];
  memset(buf, 0, sizeof buf);
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
      for (uint64_t i = 0; i < chunk; ++i) FillUnique(buf + i * kPage, &rng);
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

// How many of `pages` (each one 4 KiB page of this process's own allocations) are really in memory, asked of the
// kernel page by page (mincore). Not the process's RSS: that includes the program and its libraries, and a
// sanitizer's runtime adds megabytes of its own (an ASan build read 25 MiB for residents holding 12).
static uint64_t ResidentPages(uint8_t* const* pages, uint64_t n) {
  uint64_t resident = 0;
  for (uint64_t i = 0; i < n; ++i) {
    unsigned char in_core = 0;
    if (mincore(pages[i], kPage, &in_core) == 0 && (in_core & 1)) ++resident;
  }
  return resident;
}

// Phase 2, one resident process: fill `fill_pages` in allocations of random sizes, tell the parent (filled_fd),
// wait for every resident to be full (go_fd reaches end of file), free all but `keep_pages` at random, one page at
// a time in random order, tell the parent again, and sleep until killed. Waiting for all to be full first means no
// resident's fill reuses another's freed pages: the holes stay holes for the workload.
static void Resident(uint64_t seed, uint64_t fill_pages, uint64_t keep_pages, int filled_fd, int go_fd,
                     uint64_t lifetime_s) {
  uint64_t rng = seed;
  uint8_t** pages = malloc(fill_pages * sizeof *pages);  // every page held, in allocation order
  if (pages == NULL) _exit(1);
  uint64_t n = 0;
  while (n < fill_pages) {
    uint64_t want = RandomPages(&rng);
    if (want > fill_pages - n) want = fill_pages - n;
    uint8_t* p = AllocateTouched(want, &rng);
    if (p == NULL) break;  // out of memory: keep what there is
    for (uint64_t i = 0; i < want; ++i) pages[n++] = p + i * kPage;
  }
  char c = 1;
  if (write(filled_fd, &c, 1) != 1) _exit(1);
  while (read(go_fd, &c, 1) > 0) {
  }
  // Fisher-Yates over the pages; the first n - keep of the shuffled order are freed, in that order.
  for (uint64_t i = n; i > 1; --i) {
    const uint64_t j = SplitMix(&rng) % i;
    uint8_t* t = pages[i - 1];
    pages[i - 1] = pages[j];
    pages[j] = t;
  }
  const uint64_t drop = n > keep_pages ? n - keep_pages : 0;
  // MADV_DONTNEED frees the frame without splitting the mapping (munmap of single pages would make one VMA per
  // kept run and hit vm.max_map_count at a few GiB).
  for (uint64_t i = 0; i < drop; ++i) madvise(pages[i], kPage, MADV_DONTNEED);
  // What this process really holds now, for the parent's summary: the pages it freed are gone, the kept ones not.
  const uint64_t rss = ResidentPages(pages, n);
  free(pages);
  if (write(filled_fd, &rss, sizeof rss) != (ssize_t)sizeof rss) _exit(1);
  close(filled_fd);
  if (lifetime_s > 0) {
    sleep((unsigned)lifetime_s);
    _exit(0);
  }
  for (;;) pause();
}

// A field of /proc/meminfo in MiB (0 when it cannot be read).
static uint64_t MeminfoMib(const char* field) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (f == NULL) return 0;
  char line[256];
  uint64_t kib = 0;
  const size_t len = strlen(field);
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, field, len) == 0 && line[len] == ':') {
      sscanf(line + len + 1, "%" SCNu64, &kib);
      break;
    }
  }
  fclose(f);
  return kib / 1024;
}

// Free memory by the order of the free blocks holding it, summed over every zone of /proc/buddyinfo: how much of
// it a new process can get physically contiguous. Prints nothing when buddyinfo cannot be read (not Linux).
static void PrintBuddy(const char* when) {
  FILE* f = fopen("/proc/buddyinfo", "r");
  if (f == NULL) return;
  uint64_t by_order[11] = {0};
  char line[512];
  while (fgets(line, sizeof line, f) != NULL) {
    char* p = strstr(line, "zone");
    if (p == NULL) continue;
    p += 4;
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;  // the zone's name
    for (int order = 0; order < 11; ++order) {
      char* end = NULL;
      const unsigned long long blocks = strtoull(p, &end, 10);
      if (end == p) break;
      by_order[order] += (uint64_t)blocks << order;
      p = end;
    }
  }
  fclose(f);
  uint64_t total = 0, low = 0, mid = 0;
  for (int order = 0; order < 11; ++order) {
    total += by_order[order];
    if (order < 4) low += by_order[order];
    else if (order < 9) mid += by_order[order];
  }
  if (total == 0) return;
  printf("memage buddy when=%s free_mib=%" PRIu64 " order0_3_pct=%.1f order4_8_pct=%.1f order9_pct=%.1f\n", when,
         total * kPage >> 20, 100.0 * (double)low / (double)total, 100.0 * (double)mid / (double)total,
         100.0 * (double)(total - low - mid) / (double)total);
  fflush(stdout);
}

static int ParseU64(const char* s, uint64_t* out) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0') return 0;
  *out = v;
  return 1;
}

static int ParseArgs(int argc, char** argv, struct Options* o) {
  *o = (struct Options){.seconds = 30, .procs = 8, .seed = 1, .resident_pct = 40, .fill_pct = 95, .dir = "/tmp",
                        .keep = 1};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "--free-all") == 0) {
      o->keep = 0;
      continue;
    }
    if (strcmp(a, "--drop-caches") == 0) {
      o->drop_caches = 1;
      continue;
    }
    const char* v = i + 1 < argc ? argv[++i] : NULL;
    int ok = v != NULL;
    if (!ok) {
    } else if (strcmp(a, "--seconds") == 0) {
      ok = ParseU64(v, &o->seconds);
    } else if (strcmp(a, "--mib") == 0) {
      ok = ParseU64(v, &o->mib);
    } else if (strcmp(a, "--procs") == 0) {
      ok = ParseU64(v, &o->procs) && o->procs > 0 && o->procs <= kMaxProcs;
    } else if (strcmp(a, "--resident-pct") == 0) {
      ok = ParseU64(v, &o->resident_pct) && o->resident_pct <= 90;
    } else if (strcmp(a, "--resident-mib") == 0) {
      ok = ParseU64(v, &o->resident_mib);
    } else if (strcmp(a, "--fill-mib") == 0) {
      ok = ParseU64(v, &o->fill_mib);
    } else if (strcmp(a, "--resident-seconds") == 0) {
      ok = ParseU64(v, &o->resident_seconds);
    } else if (strcmp(a, "--fill-pct") == 0) {
      ok = ParseU64(v, &o->fill_pct) && o->fill_pct > 0 && o->fill_pct <= 95;
    } else if (strcmp(a, "--seed") == 0) {
      ok = ParseU64(v, &o->seed);
    } else if (strcmp(a, "--dir") == 0) {
      o->dir = v;
    } else {
      ok = 0;
    }
    if (!ok) {
      fprintf(stderr,
              "usage: memage [--seconds S] [--mib M] [--procs P] [--resident-pct R | --resident-mib M] "
              "[--fill-pct F | --fill-mib M] [--resident-seconds S] [--seed X] [--dir D] [--free-all] "
              "[--drop-caches] (bad: %s)\n",
              a);
      return 0;
    }
  }
  return 1;
}

// Phase 2 (see the top). Returns how many residents stayed.
static uint64_t StartResidents(const struct Options* o, uint64_t* rng) {
  const uint64_t total_mib = MeminfoMib("MemTotal"), available_mib = MeminfoMib("MemAvailable");
  const uint64_t mib_pages = 1024 * 1024 / kPage;
  const uint64_t fill = (o->fill_mib ? o->fill_mib : available_mib * o->fill_pct / 100) * mib_pages;
  uint64_t keep = (o->resident_mib ? o->resident_mib : total_mib * o->resident_pct / 100) * mib_pages;
  if (keep > fill) keep = fill;
  int filled[2], go[2];
  if (pipe(filled) != 0 || pipe(go) != 0) {
    perror("memage: pipe");
    return 0;
  }
  uint64_t started = 0;
  for (uint64_t r = 0; r < o->procs; ++r) {
    const uint64_t seed = SplitMix(rng);
    const pid_t pid = fork();
    if (pid == 0) {
      close(filled[0]);
      close(go[1]);
      Resident(seed, fill / o->procs, keep / o->procs, filled[1], go[0], o->resident_seconds);
      _exit(0);
    }
    if (pid > 0) ++started;
  }
  close(filled[1]);
  close(go[0]);
  char c;
  uint64_t full = 0, settled = 0, rss_pages = 0, rss = 0;
  while (full < started && read(filled[0], &c, 1) == 1) ++full;
  close(go[1]);  // everyone is full: free the holes now
  while (settled < full && read(filled[0], &rss, sizeof rss) == (ssize_t)sizeof rss) {
    ++settled;
    rss_pages += rss;
  }
  close(filled[0]);
  printf("memage resident procs=%" PRIu64 " filled_mib=%" PRIu64 " kept_mib=%" PRIu64 " rss_mib=%" PRIu64
         " total_mib=%" PRIu64 "\n",
         settled, fill / mib_pages, keep / mib_pages, rss_pages * (uint64_t)sysconf(_SC_PAGESIZE) >> 20, total_mib);
  fflush(stdout);
  return settled;
}

int main(int argc, char** argv) {
  struct Options o;
  if (!ParseArgs(argc, argv, &o)) return 2;
  if (o.mib == 0) o.mib = MeminfoMib("MemAvailable") * 6 / 10;
  if (o.mib == 0) o.mib = 64;
  mkdir(o.dir, 0755);
  const uint64_t t0 = NowMs(), deadline = t0 + o.seconds * 1000;
  const uint64_t total_pages = o.mib * 1024 * 1024 / kPage;
  const uint64_t cache_pages = total_pages / 4, worker_pages = (total_pages - cache_pages) / o.procs;
  printf("memage start seconds=%" PRIu64 " mib=%" PRIu64 " procs=%" PRIu64 " seed=%" PRIu64 " resident_pct=%" PRIu64
         "\n",
         o.seconds, o.mib, o.procs, o.seed, o.keep ? o.resident_pct : 0);
  fflush(stdout);
  PrintBuddy("start");
  uint64_t rng = o.seed, generations = 0;
  const pid_t cache = fork();
  if (cache == 0) {
    PageCache(SplitMix(&rng), cache_pages, o.dir, deadline, o.keep);
    _exit(0);
  }
  pid_t workers[kMaxProcs];
  for (uint64_t w = 0; w < o.procs; ++w) workers[w] = -1;
  // Keep --procs workers alive until the deadline; each lives a random number of rounds.
  while (NowMs() < deadline) {
    for (uint64_t w = 0; w < o.procs; ++w) {
      if (workers[w] > 0 && waitpid(workers[w], NULL, WNOHANG) == 0) continue;
      const uint64_t seed = SplitMix(&rng), rounds = 20 + SplitMix(&rng) % 300;
      workers[w] = fork();
      if (workers[w] == 0) {
        Churn(seed, worker_pages, rounds, deadline);
        _exit(0);
      }
      ++generations;
    }
    usleep(20000);
  }
  for (uint64_t w = 0; w < o.procs; ++w) {
    if (workers[w] > 0) waitpid(workers[w], NULL, 0);
  }
  if (cache > 0) waitpid(cache, NULL, 0);
  PrintBuddy("churned");
  const uint64_t resident = o.keep && (o.resident_pct > 0 || o.resident_mib > 0) ? StartResidents(&o, &rng) : 0;
  if (o.drop_caches) {
    sync();
    const int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd < 0 || write(fd, "3\n", 2) != 2) perror("memage: drop_caches");
    if (fd >= 0) close(fd);
  }
  PrintBuddy("done");
  printf("memage done processes=%" PRIu64 " resident=%" PRIu64 " mib=%" PRIu64 " t_ms=%" PRIu64 "\n", generations,
         resident, o.mib, NowMs() - t0);
  fflush(stdout);
  return 0;
}
