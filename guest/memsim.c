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

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { kPageSize = 4096, kWordsPerPage = kPageSize / 8 };
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
          "  --ops N           stop after N operations (default 0: no limit)\n");
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
                        .scatter = 1};
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

int main(int argc, char** argv) {
  struct Options o;
  if (ParseArgs(argc, argv, &o) != 0) {
    Usage();
    return 2;
  }
  const uint64_t pages = o.mib * (1024 * 1024 / kPageSize);
  char line[512], times[96];
  FormatTimes(times, sizeof(times));
  snprintf(line, sizeof(line),
           "memsim start mib=%" PRIu64 " pattern=%s run=%" PRIu64 " zipf_s=%.3f scatter=%d write_pct=%" PRIu64
           " think_us=%" PRIu64 " seed=0x%" PRIx64 " %s\n",
           o.mib, PatternName(o.pattern), o.run, o.zipf_s, o.scatter, o.write_pct, o.think_us, o.seed, times);
  Emit(line);

  uint8_t* mem = mmap(NULL, pages * kPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    snprintf(line, sizeof(line), "memsim FATAL mmap %" PRIu64 " MiB: %s\n", o.mib, strerror(errno));
    Emit(line);
    return 1;
  }
  struct Rng rng;
  RngSeed(&rng, o.seed);

  // page_of[rank]: zipf's rank-to-page permutation, or the chase cycle's order. Outside the working set.
  uint32_t* page_of = NULL;
  double* cdf = NULL;
  if (o.pattern == kZipf || o.pattern == kChase) {
    page_of = malloc(pages * sizeof(uint32_t));
    if (page_of == NULL) {
      Emit("memsim FATAL out of memory for the page permutation\n");
      return 1;
    }
    for (uint64_t i = 0; i < pages; i++) page_of[i] = (uint32_t)i;
    if (o.pattern == kChase || o.scatter) {
      for (uint64_t i = pages - 1; i > 0; i--) {  // Fisher-Yates
        uint64_t j = RngBelow(&rng, i + 1);
        uint32_t t = page_of[i];
        page_of[i] = page_of[j];
        page_of[j] = t;
      }
    }
  }
  if (o.pattern == kZipf) {
    cdf = BuildZipfCdf(pages, o.zipf_s);
    if (cdf == NULL) {
      Emit("memsim FATAL out of memory for the zipf table\n");
      return 1;
    }
  }

  // Touch every page once so the whole working set exists; chase stores its links in word 0 of each page: the
  // byte offset of the next page in one cycle through all pages.
  for (uint64_t p = 0; p < pages; p++) {
    uint64_t* w = (uint64_t*)(mem + p * kPageSize);
    w[0] = 0;
    w[1] = p;
  }
  if (o.pattern == kChase) {
    for (uint64_t i = 0; i < pages; i++) {
      uint64_t from = page_of[i], to = page_of[(i + 1) % pages];
      *(uint64_t*)(mem + from * kPageSize) = to * kPageSize;
    }
  }
  if (o.pattern == kChase) {  // the cycle now lives in the pages themselves
    free(page_of);
    page_of = NULL;
  }

  FormatTimes(times, sizeof(times));
  snprintf(line, sizeof(line), "memsim ready pages=%" PRIu64 " %s\n", pages, times);
  Emit(line);

  const uint64_t interval_ns = o.interval_ms * 1000000u;
  const uint64_t think_ns = o.think_us * 1000u;
  const uint64_t start_ns = NowNs(CLOCK_MONOTONIC);
  const uint64_t end_ns = o.duration_s ? start_ns + o.duration_s * 1000000000u : UINT64_MAX;
  uint64_t next_report = start_ns + interval_ns;
  uint64_t last_report = start_ns, last_ops = 0, ops = 0;
  uint64_t seq_page = 0, seq_left = 0, chase_off = 0;
  uint64_t sink = 0;
  uint64_t trace = 0;  // hash of the page sequence: equal for equal options and seed
  // Read the clock every op when thinking (it is needed anyway), else every 256 ops.
  const uint64_t clock_mask = think_ns ? 0 : 255;

  for (;;) {
    uint64_t r = RngNext(&rng);
    uint64_t page;
    switch (o.pattern) {
      case kSeq:
        if (seq_left == 0) {
          seq_page = RngBelow(&rng, pages);
          seq_left = o.run;
        }
        page = seq_page;
        seq_page = seq_page + 1 == pages ? 0 : seq_page + 1;
        seq_left--;
        break;
      case kUniform:
        page = RngBelow(&rng, pages);
        break;
      case kZipf:
        page = page_of[ZipfRank(cdf, pages, &rng)];
        break;
      case kChase:
      default:
        chase_off = *(volatile uint64_t*)(mem + chase_off);
        page = chase_off / kPageSize;
        break;
    }
    // Low bits of r pick the word (never word 0, which holds chase links) and whether this op writes.
    uint64_t* word = (uint64_t*)(mem + page * kPageSize) + 1 + (r & (kWordsPerPage - 2));
    if ((r >> 32) % 100 < o.write_pct) {
      *(volatile uint64_t*)word = r;
    } else {
      sink += *(volatile uint64_t*)word;
    }
    ops++;
    trace = (trace ^ page) * 0x100000001b3ULL;
    if (ops == o.max_ops) break;

    if ((ops & clock_mask) != 0) continue;
    uint64_t now = NowNs(CLOCK_MONOTONIC);
    if (think_ns) {
      uint64_t until = now + think_ns;
      while (now < until) now = NowNs(CLOCK_MONOTONIC);
    }
    if (now >= next_report) {
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
    if (now >= end_ns) break;
  }
  FormatTimes(times, sizeof(times));
  snprintf(line, sizeof(line), "memsim done ops=%" PRIu64 " trace=0x%016" PRIx64 " sink=0x%04" PRIx64 " %s\n", ops,
           trace, sink & 0xffff, times);
  Emit(line);
  free(page_of);  // NULL for seq, uniform and chase
  free(cdf);
  return 0;
}
