// memsim: a memory-access simulator for the test guest, after the "sim" workload of the Halite paper.
//
// It touches every page of a --mib MiB working set once, then runs operations forever (or for --duration-s or --ops):
// each operation picks a page by the access pattern, reads or writes one 64-bit word in it, then waits --think-us
// microseconds (busy-waiting, so the guest stays runnable). Every --interval-ms (default 100) it prints
//   memsim t_ms=... rt=... ops=<total> dt_ms=... ops_per_s=<this interval's rate>
// where t_ms is CLOCK_MONOTONIC in ms and rt is CLOCK_REALTIME as seconds.milliseconds.
//
// Patterns:
//   seq      sequential runs of --run R pages from a random start page (wrapping at the end)
//   uniform  each page equally likely
//   zipf     page popularity follows Zipf with skew --zipf-s S over the pages; hot pages are scattered over the
//            working set by a seeded permutation (--no-scatter keeps rank 0 at page 0, rank 1 at page 1, ...)
//   chase    pointer chasing through one random cycle over all pages (each load depends on the previous one)
// The sequence of pages, offsets and read/write choices is a pure function of the options and --seed; only the
// timing (how many operations fit in an interval) depends on the machine. With --ops N the run stops after N
// operations and the final line "memsim done ops=N trace=0x..." carries a hash of the page sequence, the same on
// every run with the same options.
//
// A desktop, not one program: --procs N runs N processes with --mib/N MiB each (N address spaces, filled at the same
// time), of which only the first --active K run operations; the others sit idle once their memory is touched, as a
// desktop's background applications do. The parent prints the report lines (the sum of the active processes'
// operations) and, with --ops N, stops when every active process has done N; the done line's trace folds theirs.
//
// --frames: once the memory is touched, reads where it is in physical memory (/proc/self/pagemap; needs root, as
// the test guest's programs are) and prints, for the active processes' pages, the idle ones' and all,
//   memsim frames set=active|idle|all pages=.. mapped=.. runs=.. groups64=.. va_groups64=..
// runs: maximal runs of pages consecutive in both virtual and physical memory; groups64: distinct 64-frame aligned
// groups of physical memory holding them (what blocks of 64 pages in physical order must bring in to cover the
// set); va_groups64: the same for 64-page groups in virtual order (mapped / 64, rounded up). On a freshly booted
// guest the two are close; on an aged one (memage) groups64 is many times larger. Then, at ready and every 10 s,
//   memsim vmstat pgmigrate_success=.. compact_daemon_wake=.. thp_fault_alloc=.. thp_collapse_alloc=..
// (/proc/vmstat): pages the kernel moved since (compaction, khugepaged) make the frames line stale.

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kPageSize = 4096, kWordsPerPage = kPageSize / 8, kMaxProcs = 64 };
enum Pattern { kSeq, kUniform, kZipf, kChase };

struct Options {
  uint64_t mib;
  enum Pattern pattern;
  uint64_t run;
  double zipf_s;
  uint64_t write_pct;
  uint64_t think_us;
  uint64_t seed;
  uint64_t interval_ms;
  uint64_t duration_s;
  uint64_t max_ops;
  int scatter;
  uint64_t procs;
  uint64_t active;
  int frames;
};

// xoshiro256** seeded through splitmix64: small, fast, and the same sequence on every machine.
struct Rng {
  uint64_t s[4];
};

static uint64_t SplitMix(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void RngSeed(struct Rng* r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = SplitMix(&seed);
}

static inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t RngNext(struct Rng* r) {
  uint64_t* s = r->s;
  uint64_t result = Rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = Rotl(s[3], 45);
  return result;
}

// Uniform in [0, n) without modulo bias worth caring about for n < 2^32 (multiply-shift).
static inline uint64_t RngBelow(struct Rng* r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)RngNext(r) * n) >> 64);
}

static uint64_t NowNs(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void FormatTimes(char* buf, size_t len) {
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  snprintf(buf, len, "t_ms=%" PRIu64 " rt=%lld.%03ld", NowNs(CLOCK_MONOTONIC) / 1000000u, (long long)rt.tv_sec,
           rt.tv_nsec / 1000000L);
}

static void Emit(const char* line) {
  size_t n = strlen(line);
  while (n > 0) {
    ssize_t w = write(STDOUT_FILENO, line, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    line += w;
    n -= (size_t)w;
  }
}

static void Usage(void) {
  fprintf(stderr,
          "usage: memsim [options]\n"
          "  --mib N           working set in MiB (default 256)\n"
          "  --pattern P       seq | uniform | zipf | chase (default uniform)\n"
          "  --run R           pages per sequential run for seq (default 16)\n"
          "  --zipf-s S        Zipf skew for zipf (default 0.99)\n"
          "  --no-scatter      zipf: hottest pages at the start instead of scattered\n"
          "  --write-pct P     percent of operations that write (default 0)\n"
          "  --think-us T      busy-wait T microseconds after each operation (default 0)\n"
          "  --seed S          seed (default 1)\n"
          "  --interval-ms M   report period (default 100)\n"
          "  --duration-s D    stop after D seconds (default 0: run forever)\n"
          "  --ops N           stop after N operations (default 0: no limit)\n"
          "  --procs N         N processes of --mib/N MiB each (default 1)\n"
          "  --active K        only the first K of them run operations, the others idle (default: all)\n"
          "  --frames          print where the working set is in physical memory (root)\n");
}

static int ParseU64(const char* s, uint64_t* out) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0') return -1;
  *out = v;
  return 0;
}

static int ParseArgs(int argc, char** argv, struct Options* o) {
  *o = (struct Options){.mib = 256, .pattern = kUniform, .run = 16, .zipf_s = 0.99, .seed = 1, .interval_ms = 100,
                        .scatter = 1, .procs = 1};
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      Usage();
      exit(0);
    }
    if (strcmp(a, "--no-scatter") == 0) {
      o->scatter = 0;
      continue;
    }
    if (strcmp(a, "--frames") == 0) {
      o->frames = 1;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "memsim: '%s' needs a value\n", a);
      return -1;
    }
    const char* v = argv[++i];
    int bad = 0;
    if (strcmp(a, "--mib") == 0) {
      bad = ParseU64(v, &o->mib);
    } else if (strcmp(a, "--pattern") == 0) {
      if (strcmp(v, "seq") == 0) o->pattern = kSeq;
      else if (strcmp(v, "uniform") == 0) o->pattern = kUniform;
      else if (strcmp(v, "zipf") == 0) o->pattern = kZipf;
      else if (strcmp(v, "chase") == 0) o->pattern = kChase;
      else bad = 1;
    } else if (strcmp(a, "--run") == 0) {
      bad = ParseU64(v, &o->run) || o->run == 0;
    } else if (strcmp(a, "--zipf-s") == 0) {
      char* end;
      o->zipf_s = strtod(v, &end);
      bad = end == v || *end != '\0' || !(o->zipf_s > 0.0) || o->zipf_s > 10.0;
    } else if (strcmp(a, "--write-pct") == 0) {
      bad = ParseU64(v, &o->write_pct) || o->write_pct > 100;
    } else if (strcmp(a, "--think-us") == 0) {
      bad = ParseU64(v, &o->think_us);
    } else if (strcmp(a, "--seed") == 0) {
      bad = ParseU64(v, &o->seed);
    } else if (strcmp(a, "--interval-ms") == 0) {
      bad = ParseU64(v, &o->interval_ms) || o->interval_ms == 0;
    } else if (strcmp(a, "--duration-s") == 0) {
      bad = ParseU64(v, &o->duration_s);
    } else if (strcmp(a, "--ops") == 0) {
      bad = ParseU64(v, &o->max_ops);
    } else if (strcmp(a, "--procs") == 0) {
      bad = ParseU64(v, &o->procs) || o->procs == 0 || o->procs > kMaxProcs;
    } else if (strcmp(a, "--active") == 0) {
      bad = ParseU64(v, &o->active) || o->active == 0;
    } else {
      fprintf(stderr, "memsim: unknown option '%s'\n", a);
      return -1;
    }
    if (bad) {
      fprintf(stderr, "memsim: bad value '%s' for %s\n", v, a);
      return -1;
    }
  }
  if (o->mib == 0 || o->mib > (1u << 20)) {
    fprintf(stderr, "memsim: --mib must be 1..1048576\n");
    return -1;
  }
  if (o->active == 0) o->active = o->procs;
  if (o->active > o->procs || o->mib < o->procs) {
    fprintf(stderr, "memsim: --active must be at most --procs, and --mib at least --procs\n");
    return -1;
  }
  return 0;
}

static const char* PatternName(enum Pattern p) {
  static const char* const kNames[] = {"seq", "uniform", "zipf", "chase"};
  return kNames[p];
}

// Zipf sampling by inverse CDF: cdf[k] = P(rank <= k), searched with a binary search. The table costs 8 bytes per
// page, outside the working set, and makes every sample exact and reproducible.
static double* BuildZipfCdf(uint64_t n, double s) {
  double* cdf = malloc(n * sizeof(double));
  if (cdf == NULL) return NULL;
  double total = 0.0;
  for (uint64_t k = 0; k < n; k++) {
    total += exp(-s * log((double)(k + 1)));
    cdf[k] = total;
  }
  for (uint64_t k = 0; k < n; k++) cdf[k] /= total;
  cdf[n - 1] = 1.0;
  return cdf;
}

static inline uint64_t ZipfRank(const double* cdf, uint64_t n, struct Rng* r) {
  double u = (double)(RngNext(r) >> 11) * 0x1.0p-53;
  uint64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (cdf[mid] > u) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}


// The /proc/vmstat counters that say whether the kernel moved pages (compaction) or made huge pages since.
static void PrintVmstat(void) {
  static const char* const kKeys[] = {"pgmigrate_success", "compact_daemon_wake", "thp_fault_alloc",
                                      "thp_collapse_alloc"};
  char line[512] = "memsim vmstat", entry[128];
  FILE* f = fopen("/proc/vmstat", "r");
  if (f == NULL) return;
  char key[64];
  unsigned long long v;
  while (fscanf(f, "%63s %llu", key, &v) == 2) {
    for (size_t i = 0; i < sizeof(kKeys) / sizeof(kKeys[0]); i++) {
      if (strcmp(key, kKeys[i]) != 0) continue;
      snprintf(entry, sizeof(entry), " %s=%llu", key, v);
      strncat(line, entry, sizeof(line) - strlen(line) - 2);
    }
  }
  fclose(f);
  strcat(line, "\n");
  Emit(line);
}

// One process's working set and access pattern.
struct Sim {
  const struct Options* o;
  uint8_t* mem;
  uint64_t pages;
  uint32_t* page_of;  // zipf's rank-to-page permutation; outside the working set
  double* cdf;        // zipf's table
  struct Rng rng;
};

// Maps and touches the working set: word 1 of page p holds p + `salt` (process i of --procs has salt i << 32, so
// no two processes hold equal pages: a checkpoint stores equal pages once, which real memory seldom has); chase
// stores its links in word 0 (the byte offset of the next page in one cycle through all pages). Returns 0, or
// prints a FATAL line and returns 1.
static int SimPrepare(struct Sim* sim, const struct Options* o, uint64_t pages, uint64_t seed, uint64_t salt) {
  char line[256];
  *sim = (struct Sim){.o = o, .pages = pages};
  sim->mem = mmap(NULL, pages * kPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (sim->mem == MAP_FAILED) {
    snprintf(line, sizeof(line), "memsim FATAL mmap %" PRIu64 " MiB: %s\n", pages * kPageSize >> 20, strerror(errno));
    Emit(line);
    return 1;
  }
  RngSeed(&sim->rng, seed);
  if (o->pattern == kZipf || o->pattern == kChase) {
    sim->page_of = malloc(pages * sizeof(uint32_t));
    if (sim->page_of == NULL) {
      Emit("memsim FATAL out of memory for the page permutation\n");
      return 1;
    }
    for (uint64_t i = 0; i < pages; i++) sim->page_of[i] = (uint32_t)i;
    if (o->pattern == kChase || o->scatter) {
      for (uint64_t i = pages - 1; i > 0; i--) {  // Fisher-Yates
        uint64_t j = RngBelow(&sim->rng, i + 1);
        uint32_t t = sim->page_of[i];
        sim->page_of[i] = sim->page_of[j];
        sim->page_of[j] = t;
      }
    }
  }
  if (o->pattern == kZipf) {
    sim->cdf = BuildZipfCdf(pages, o->zipf_s);
    if (sim->cdf == NULL) {
      Emit("memsim FATAL out of memory for the zipf table\n");
      return 1;
    }
  }
  for (uint64_t p = 0; p < pages; p++) {
    uint64_t* w = (uint64_t*)(sim->mem + p * kPageSize);
    w[0] = 0;
    w[1] = p + salt;
  }
  if (o->pattern == kChase) {
    for (uint64_t i = 0; i < pages; i++) {
      uint64_t from = sim->page_of[i], to = sim->page_of[(i + 1) % pages];
      *(uint64_t*)(sim->mem + from * kPageSize) = to * kPageSize;
    }
    free(sim->page_of);  // the cycle now lives in the pages themselves
    sim->page_of = NULL;
  }
  return 0;
}

struct SimResult {
  uint64_t ops, trace, sink;
};

// Runs operations until --duration-s or --ops. A process of --procs N publishes its running total in `published`
// (read by the parent, which prints the reports) and prints nothing; a lone process prints its reports itself.
static struct SimResult SimRun(struct Sim* sim, volatile uint64_t* published) {
  const struct Options* o = sim->o;
  char line[512], times[96];
  const uint64_t pages = sim->pages;
  uint8_t* const mem = sim->mem;
  const uint64_t interval_ns = o->interval_ms * 1000000u;
  const uint64_t think_ns = o->think_us * 1000u;
  const uint64_t start_ns = NowNs(CLOCK_MONOTONIC);
  const uint64_t end_ns = o->duration_s ? start_ns + o->duration_s * 1000000000u : UINT64_MAX;
  uint64_t next_report = start_ns + interval_ns;
  uint64_t last_report = start_ns, last_ops = 0, ops = 0;
  uint64_t seq_page = 0, seq_left = 0, chase_off = 0;
  uint64_t sink = 0;
  uint64_t trace = 0;  // hash of the page sequence: equal for equal options and seed
  // Read the clock every op when thinking (it is needed anyway), else every 256 ops.
  const uint64_t clock_mask = think_ns ? 0 : 255;
  const uint64_t vmstat_ns = 10000000000u;
  uint64_t next_vmstat = o->frames && published == NULL ? start_ns + vmstat_ns : UINT64_MAX;

  for (;;) {
    uint64_t r = RngNext(&sim->rng);
    uint64_t page;
    switch (o->pattern) {
      case kSeq:
        if (seq_left == 0) {
          seq_page = RngBelow(&sim->rng, pages);
          seq_left = o->run;
        }
        page = seq_page;
        seq_page = seq_page + 1 == pages ? 0 : seq_page + 1;
        seq_left--;
        break;
      case kUniform:
        page = RngBelow(&sim->rng, pages);
        break;
      case kZipf:
        page = sim->page_of[ZipfRank(sim->cdf, pages, &sim->rng)];
        break;
      case kChase:
      default:
        chase_off = *(volatile uint64_t*)(mem + chase_off);
        page = chase_off / kPageSize;
        break;
    }
    // Low bits of r pick the word (never word 0, which holds chase links) and whether this op writes.
    uint64_t* word = (uint64_t*)(mem + page * kPageSize) + 1 + (r & (kWordsPerPage - 2));
    if ((r >> 32) % 100 < o->write_pct) {
      *(volatile uint64_t*)word = r;
    } else {
      sink += *(volatile uint64_t*)word;
    }
    ops++;
    trace = (trace ^ page) * 0x100000001b3ULL;
    if (ops == o->max_ops) break;

    if ((ops & clock_mask) != 0) continue;
    uint64_t now = NowNs(CLOCK_MONOTONIC);
    if (think_ns) {
      uint64_t until = now + think_ns;
      while (now < until) now = NowNs(CLOCK_MONOTONIC);
    }
    if (published != NULL) {
      __atomic_store_n(published, ops, __ATOMIC_RELAXED);
    } else if (now >= next_report) {
      uint64_t dt = now - last_report;
      uint64_t rate = dt ? (uint64_t)((double)(ops - last_ops) * 1e9 / (double)dt) : 0;
      FormatTimes(times, sizeof(times));
      snprintf(line, sizeof(line),
               "memsim %s ops=%" PRIu64 " dt_ms=%" PRIu64 " ops_per_s=%" PRIu64 "\n", times, ops, dt / 1000000u,
               rate);
      Emit(line);
      last_report = now;
      last_ops = ops;
      // Skip missed deadlines (a paused guest) instead of printing a burst of catch-up lines.
      next_report += interval_ns;
      if (next_report <= now) next_report = now + interval_ns;
    }
    if (now >= next_vmstat) {
      PrintVmstat();
      next_vmstat = now + vmstat_ns;
    }
    if (now >= end_ns) break;
  }
  if (published != NULL) __atomic_store_n(published, ops, __ATOMIC_RELAXED);
  return (struct SimResult){ops, trace, sink};
}

// ---- Where the working set is in physical memory (--frames) ----

// pfn[i] = the frame of page i of mem, 0 when unknown (not present, or no permission to see frames).
static void ReadFrames(const uint8_t* mem, uint64_t pages, uint64_t* pfn) {
  memset(pfn, 0, pages * sizeof(uint64_t));
  FILE* f = fopen("/proc/self/pagemap", "rb");
  if (f == NULL) return;
  const uint64_t first = (uint64_t)(uintptr_t)mem / kPageSize;
  if (fseeko(f, (off_t)(first * 8), SEEK_SET) == 0) {
    const size_t got = fread(pfn, sizeof(uint64_t), pages, f);
    for (size_t i = 0; i < got; i++) {
      const uint64_t e = pfn[i];
      pfn[i] = (e >> 63) ? (e & ((1ULL << 55) - 1)) : 0;  // bit 63 present, bits 0-54 the frame
    }
  }
  fclose(f);
}

static int CompareU64(const void* a, const void* b) {
  const uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

// Prints the frames line of one set of pages (pfn in virtual order; 0 = unknown).
static void PrintFrames(const char* set, const uint64_t* pfn, uint64_t pages) {
  uint64_t mapped = 0, runs = 0, prev = 0;
  uint64_t* groups = malloc((pages ? pages : 1) * sizeof(uint64_t));
  if (groups == NULL) return;
  for (uint64_t i = 0; i < pages; i++) {
    if (pfn[i] == 0) continue;
    if (mapped == 0 || pfn[i] != prev + 1) runs++;
    prev = pfn[i];
    groups[mapped++] = pfn[i] >> 6;
  }
  qsort(groups, mapped, sizeof(uint64_t), CompareU64);
  uint64_t distinct = 0;
  for (uint64_t i = 0; i < mapped; i++) distinct += i == 0 || groups[i] != groups[i - 1];
  free(groups);
  char line[256];
  snprintf(line, sizeof(line),
           "memsim frames set=%s pages=%" PRIu64 " mapped=%" PRIu64 " runs=%" PRIu64 " groups64=%" PRIu64
           " va_groups64=%" PRIu64 "\n",
           set, pages, mapped, runs, distinct, (mapped + 63) / 64);
  Emit(line);
}

static void PrintStart(const struct Options* o) {
  char line[512], times[96];
  FormatTimes(times, sizeof(times));
  char procs[64] = "";
  if (o->procs > 1) snprintf(procs, sizeof(procs), " procs=%" PRIu64 " active=%" PRIu64, o->procs, o->active);
  snprintf(line, sizeof(line),
           "memsim start mib=%" PRIu64 " pattern=%s run=%" PRIu64 " zipf_s=%.3f scatter=%d write_pct=%" PRIu64
           " think_us=%" PRIu64 " seed=0x%" PRIx64 "%s %s\n",
           o->mib, PatternName(o->pattern), o->run, o->zipf_s, o->scatter, o->write_pct, o->think_us, o->seed, procs,
           times);
  Emit(line);
}

static void PrintReady(uint64_t pages) {
  char line[256], times[96];
  FormatTimes(times, sizeof(times));
  snprintf(line, sizeof(line), "memsim ready pages=%" PRIu64 " %s\n", pages, times);
  Emit(line);
}

static void PrintDone(const struct SimResult* r) {
  char line[256], times[96];
  FormatTimes(times, sizeof(times));
  snprintf(line, sizeof(line), "memsim done ops=%" PRIu64 " trace=0x%016" PRIx64 " sink=0x%04" PRIx64 " %s\n", r->ops,
           r->trace, r->sink & 0xffff, times);
  Emit(line);
}

// One process, one working set: the classic memsim.
static int RunAlone(const struct Options* o) {
  const uint64_t pages = o->mib * (1024 * 1024 / kPageSize);
  PrintStart(o);
  struct Sim sim;
  if (SimPrepare(&sim, o, pages, o->seed, 0) != 0) return 1;
  PrintReady(pages);
  if (o->frames) {
    uint64_t* pfn = malloc(pages * sizeof(uint64_t));
    if (pfn != NULL) {
      ReadFrames(sim.mem, pages, pfn);
      PrintFrames("all", pfn, pages);
      free(pfn);
    }
    PrintVmstat();
  }
  const struct SimResult r = SimRun(&sim, NULL);
  PrintDone(&r);
  free(sim.page_of);
  free(sim.cdf);
  return 0;
}

// Shared between the parent and the processes of --procs (an anonymous shared mapping made before fork).
struct Shared {
  struct {
    uint64_t ops;
    uint64_t trace, sink;
    uint64_t pad[5];  // one cache line each: the active processes write theirs all the time
  } proc[kMaxProcs];
};

// --procs N: N processes, the first --active of them running operations. Returns the exit status.
static int RunDesktop(const struct Options* o) {
  const uint64_t n = o->procs, each = o->mib * (1024 * 1024 / kPageSize) / n, pages = each * n;
  PrintStart(o);
  struct Shared* sh = mmap(NULL, sizeof(struct Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint64_t* pfn = NULL;  // pages' frames, process after process (--frames)
  if (o->frames) pfn = mmap(NULL, pages * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int ready[2], go[2];
  if (sh == MAP_FAILED || pfn == MAP_FAILED || pipe(ready) != 0 || pipe(go) != 0) {
    Emit("memsim FATAL shared memory or pipes for --procs\n");
    return 1;
  }
  memset(sh, 0, sizeof(*sh));
  pid_t pids[kMaxProcs];
  for (uint64_t i = 0; i < n; i++) {
    pids[i] = fork();
    if (pids[i] < 0) {
      Emit("memsim FATAL fork\n");
      return 1;
    }
    if (pids[i] > 0) continue;
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent that reports for them
    close(ready[0]);
    close(go[1]);
    struct Sim sim;
    // Process 0 has the lone memsim's seed; the others their own.
    if (SimPrepare(&sim, o, each, o->seed ^ (i * 0x9e3779b97f4a7c15ULL), i << 32) != 0) _exit(1);
    if (pfn != NULL) ReadFrames(sim.mem, each, pfn + i * each);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    while (read(go[0], &c, 1) > 0) {
    }
    if (i >= o->active) {
      for (;;) pause();  // idle: its memory stays, untouched
    }
    const struct SimResult r = SimRun(&sim, &sh->proc[i].ops);
    sh->proc[i].trace = r.trace;
    sh->proc[i].sink = r.sink;
    __atomic_store_n(&sh->proc[i].ops, r.ops, __ATOMIC_RELEASE);
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char c;
  for (uint64_t got = 0; got < n; got++) {
    if (read(ready[0], &c, 1) != 1) {
      Emit("memsim FATAL a process died before its memory was ready\n");
      return 1;
    }
  }
  PrintReady(pages);
  if (pfn != NULL) {
    const uint64_t active = o->active * each;
    PrintFrames("active", pfn, active);
    if (active < pages) PrintFrames("idle", pfn + active, pages - active);
    PrintFrames("all", pfn, pages);
    PrintVmstat();
  }
  close(go[1]);  // start

  char line[512], times[96];
  const uint64_t interval_ns = o->interval_ms * 1000000u;
  uint64_t last_report = NowNs(CLOCK_MONOTONIC), last_ops = 0, running = o->active;
  uint64_t next_vmstat = o->frames ? last_report + 10000000000u : UINT64_MAX;
  while (running > 0) {
    // Sleep to the next report, then collect the active processes that finished.
    struct timespec ts = {(time_t)(o->interval_ms / 1000), (long)(o->interval_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    for (uint64_t i = 0; i < o->active; i++) {
      if (pids[i] > 0 && waitpid(pids[i], NULL, WNOHANG) == pids[i]) {
        pids[i] = 0;
        running--;
      }
    }
    uint64_t ops = 0;
    for (uint64_t i = 0; i < o->active; i++) ops += __atomic_load_n(&sh->proc[i].ops, __ATOMIC_ACQUIRE);
    const uint64_t now = NowNs(CLOCK_MONOTONIC), dt = now - last_report;
    if (dt < interval_ns / 2 && running > 0) continue;
    const uint64_t rate = dt ? (uint64_t)((double)(ops - last_ops) * 1e9 / (double)dt) : 0;
    FormatTimes(times, sizeof(times));
    snprintf(line, sizeof(line), "memsim %s ops=%" PRIu64 " dt_ms=%" PRIu64 " ops_per_s=%" PRIu64 "\n", times, ops,
             dt / 1000000u, rate);
    Emit(line);
    last_report = now;
    last_ops = ops;
    if (now >= next_vmstat) {
      PrintVmstat();
      next_vmstat = now + 10000000000u;
    }
  }
  struct SimResult total = {0, 0, 0};
  for (uint64_t i = 0; i < o->active; i++) {
    total.ops += sh->proc[i].ops;
    total.trace = (total.trace ^ sh->proc[i].trace) * 0x100000001b3ULL;
    total.sink += sh->proc[i].sink;
  }
  for (uint64_t i = o->active; i < n; i++) {  // the idle ones: ours, by pid
    kill(pids[i], SIGKILL);
    waitpid(pids[i], NULL, 0);
  }
  PrintDone(&total);
  return 0;
}

int main(int argc, char** argv) {
  struct Options o;
  if (ParseArgs(argc, argv, &o) != 0) {
    Usage();
    return 2;
  }
  return o.procs > 1 ? RunDesktop(&o) : RunAlone(&o);
}
