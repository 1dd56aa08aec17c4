// memcheck: a self-checking memory workload for the test guest.
//
// It fills --mib MiB with a pattern that depends on (seed, page offset, generation), then forever: verifies every
// page against the generation it should hold and rewrites it with the next one, one page at a time, and prints one
// line per pass. A page lost, zeroed, stale (an older generation) or moved to the wrong address after a checkpoint
// and restore shows up as BAD with the offset of the first wrong byte.
//
// Generation numbering: the initial fill writes generation 0; pass k verifies generation k-1 and writes
// generation k, so after pass k the memory holds generation k (printed as gen=k). Because verify and rewrite are
// done page by page, a snapshot taken mid-pass holds gen k below the cursor and gen k-1 above it, which is exactly
// what the restored process expects.
//
// Output lines (stdout, one write each, CR/LF added by the serial tty):
//   memcheck start mib=256 seed=0x1 pages=65536 t_ms=... rt=...
//   memcheck filled mib=256 fill_ms=... t_ms=... rt=...
//   memcheck pass=17 gen=17 mib=256 sum=0x1234abcd OK pass_ms=812 t_ms=... rt=...
//   memcheck pass=18 gen=18 mib=256 sum=0x... BAD first_bad_offset=0x... bad_pages=3 expected=0x... got=0x...
//     pass_ms=... t_ms=... rt=...
// t_ms is CLOCK_MONOTONIC in ms, rt is CLOCK_REALTIME as seconds.milliseconds.
//
// With --disk DEV it also keeps a journal on a block device, so that a restore which pairs the memory with the
// wrong disk (an older or a newer image) is caught: after each pass it writes a 4 KiB record (pass, sum) with
// O_DIRECT to slot pass % 64, and before that it checks that slot (pass-1) % 64 holds exactly the previous pass
// (the one the memory remembers) and that slot pass % 64 holds no pass >= this one (a disk ahead of the memory).
// The pass line then ends in "disk=ok" (or "disk=new" on the first pass); a mismatch turns it into
// "BAD disk=..." naming what was found.
// sum is a 32-bit fold of the sum of all 64-bit words read in the pass; for a given seed, size and generation it is
// the same on every run, so a host can also compare it.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { kPageSize = 4096, kWordsPerPage = kPageSize / 8 };

// Odd constants: the word step inside a page, and the mixing multipliers.
static const uint64_t kWordStep = 0x9e3779b97f4a7c15ULL;

static uint64_t Mix64(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ULL;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dULL;
  x ^= x >> 33;
  return x;
}

// The first word of page `page` at generation `gen`; word i holds PageBase + i * kWordStep.
static uint64_t PageBase(uint64_t seed, uint64_t page, uint64_t gen) {
  return Mix64(seed ^ Mix64(gen * 0xd6e8feb86659fd93ULL + page * 0xa0761d6478bd642fULL + 1));
}

static uint64_t NowMs(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

// " t_ms=<monotonic ms> rt=<realtime s.ms>"
static void FormatTimes(char* buf, size_t len) {
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  snprintf(buf, len, "t_ms=%" PRIu64 " rt=%lld.%03ld", NowMs(CLOCK_MONOTONIC), (long long)rt.tv_sec,
           rt.tv_nsec / 1000000L);
}

static void Emit(const char* line) {
  // One write per line so lines never interleave with kernel messages mid-way more than necessary.
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
          "usage: memcheck [--mib N] [--seed S] [--passes N] [--disk DEV] [--interval-ms N]\n"
          "  --mib N     memory to check in MiB (default 256)\n"
          "  --seed S    pattern seed (default 1)\n"
          "  --passes N  stop after N passes, exit 1 if any was BAD (default 0: run forever)\n"
          "  --corrupt-offset X  flip one byte at offset X after the fill (tests the checker itself)\n"
          "  --disk DEV  keep a journal of the passes on block device DEV and check it against memory\n"
          "  --interval-ms N  sleep N ms after each pass (a desktop's periodic touches of its working set)\n");
}

static int ParseU64(const char* s, uint64_t* out) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0') return -1;
  *out = v;
  return 0;
}

struct PassResult {
  uint64_t sum;
  uint64_t bad_pages;
  uint64_t first_bad_offset;  // byte offset of the first wrong 64-bit word's first wrong byte
  uint64_t first_expected;
  uint64_t first_got;
  uint64_t last_bad_page;     // page index + 1 of the last page counted bad (0: none yet)
  int have_first;
};

// Records a wrong word. Kept out of line so the hot loop stays small.
static __attribute__((noinline, cold)) void NoteBad(struct PassResult* r, uint64_t page, int word, uint64_t expected,
                                                    uint64_t got) {
  if (r->last_bad_page != page + 1) {
    r->last_bad_page = page + 1;
    r->bad_pages++;
  }
  if (!r->have_first) {
    r->have_first = 1;
    uint64_t x = expected ^ got;  // little-endian: the lowest differing byte comes first in memory
    r->first_bad_offset = page * kPageSize + (uint64_t)word * 8 + (uint64_t)(__builtin_ctzll(x) / 8);
    r->first_expected = expected;
    r->first_got = got;
  }
}

// Verifies generation `gen` and writes generation gen+1, page by page, in one sweep.
static void Pass(uint64_t* mem, uint64_t pages, uint64_t seed, uint64_t gen, struct PassResult* r) {
  memset(r, 0, sizeof(*r));
  uint64_t sum = 0;
  for (uint64_t p = 0; p < pages; p++) {
    uint64_t* w = mem + p * kWordsPerPage;
    uint64_t expect = PageBase(seed, p, gen);
    uint64_t next = PageBase(seed, p, gen + 1);
    for (int i = 0; i < kWordsPerPage; i++) {
      uint64_t v = w[i];
      if (__builtin_expect(v != expect, 0)) NoteBad(r, p, i, expect, v);
      sum += v;
      w[i] = next;
      expect += kWordStep;
      next += kWordStep;
    }
  }
  r->sum = sum;
}

static void Fill(uint64_t* mem, uint64_t pages, uint64_t seed) {
  for (uint64_t p = 0; p < pages; p++) {
    uint64_t* w = mem + p * kWordsPerPage;
    uint64_t v = PageBase(seed, p, 0);
    for (int i = 0; i < kWordsPerPage; i++) {
      w[i] = v;
      v += kWordStep;
    }
  }
}

// ---- the disk journal (--disk) ----

enum { kDiskSlots = 64, kDiskBase = 1 << 20 };
static const char kDiskMagic[8] = {'H', 'L', 'T', 'D', 'I', 'S', 'K', '1'};

struct DiskRecord {
  char magic[8];
  uint64_t seed;
  uint64_t pass;
  uint32_t sum;
};

// Reads slot `slot` into *rec; returns 0 when it holds a record of this seed, 1 when empty/foreign, -1 on error.
static int DiskRead(int fd, uint8_t* buf, uint64_t slot, uint64_t seed, struct DiskRecord* rec) {
  if (pread(fd, buf, kPageSize, (off_t)(kDiskBase + slot * kPageSize)) != kPageSize) return -1;
  memcpy(rec, buf, sizeof(*rec));
  return memcmp(rec->magic, kDiskMagic, sizeof(kDiskMagic)) == 0 && rec->seed == seed ? 0 : 1;
}

// Checks the journal against the memory's last pass (`last_pass`, `last_sum`; 0: none yet) and writes this
// pass's record. Writes the verdict ("disk=ok", "disk=new" or "BAD disk=...") into out.
static void DiskJournal(int fd, uint8_t* buf, uint64_t seed, uint64_t pass, uint32_t sum, uint64_t last_pass,
                        uint32_t last_sum, char* out, size_t len, int* bad) {
  struct DiskRecord prev, next;
  *bad = 1;
  if (last_pass != 0) {
    int r = DiskRead(fd, buf, last_pass % kDiskSlots, seed, &prev);
    if (r < 0) {
      snprintf(out, len, "BAD disk=read-error:%s", strerror(errno));
      return;
    }
    if (r != 0 || prev.pass != last_pass || prev.sum != last_sum) {
      snprintf(out, len, "BAD disk=stale-or-foreign(slot %" PRIu64 " holds pass %" PRIu64 ", memory says %" PRIu64 ")",
               last_pass % kDiskSlots, r == 0 ? prev.pass : 0, last_pass);
      return;
    }
  }
  int r = DiskRead(fd, buf, pass % kDiskSlots, seed, &next);
  if (r < 0) {
    snprintf(out, len, "BAD disk=read-error:%s", strerror(errno));
    return;
  }
  if (r == 0 && next.pass >= pass) {
    snprintf(out, len, "BAD disk=ahead(slot %" PRIu64 " holds pass %" PRIu64 ", memory is at pass %" PRIu64 ")",
             pass % kDiskSlots, next.pass, pass);
    return;
  }
  memset(buf, 0, kPageSize);
  struct DiskRecord rec;
  memcpy(rec.magic, kDiskMagic, sizeof(kDiskMagic));
  rec.seed = seed;
  rec.pass = pass;
  rec.sum = sum;
  memcpy(buf, &rec, sizeof(rec));
  if (pwrite(fd, buf, kPageSize, (off_t)(kDiskBase + (pass % kDiskSlots) * kPageSize)) != kPageSize) {
    snprintf(out, len, "BAD disk=write-error:%s", strerror(errno));
    return;
  }
  *bad = 0;
  snprintf(out, len, "%s", last_pass ? "disk=ok" : "disk=new");
}

int main(int argc, char** argv) {
  uint64_t mib = 256, seed = 1, max_passes = 0, corrupt = UINT64_MAX, interval_ms = 0;
  const char* disk = NULL;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    uint64_t* target = NULL;
    if (strcmp(a, "--disk") == 0 && i + 1 < argc) {
      disk = argv[++i];
      continue;
    }
    if (strcmp(a, "--mib") == 0) {
      target = &mib;
    } else if (strcmp(a, "--seed") == 0) {
      target = &seed;
    } else if (strcmp(a, "--passes") == 0) {
      target = &max_passes;
    } else if (strcmp(a, "--corrupt-offset") == 0) {
      target = &corrupt;
    } else if (strcmp(a, "--interval-ms") == 0) {
      target = &interval_ms;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      Usage();
      return 0;
    }
    if (target == NULL || i + 1 >= argc || ParseU64(argv[i + 1], target) != 0) {
      fprintf(stderr, "memcheck: bad argument '%s'\n", a);
      Usage();
      return 2;
    }
    i++;
  }
  if (mib == 0 || mib > (1u << 20)) {
    fprintf(stderr, "memcheck: --mib must be 1..1048576\n");
    return 2;
  }
  const uint64_t pages = mib * (1024 * 1024 / kPageSize);
  char line[512], times[96];

  FormatTimes(times, sizeof(times));
  snprintf(line, sizeof(line), "memcheck start mib=%" PRIu64 " seed=0x%" PRIx64 " pages=%" PRIu64 " %s\n", mib, seed,
           pages, times);
  Emit(line);

  uint64_t* mem = mmap(NULL, pages * kPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    snprintf(line, sizeof(line), "memcheck FATAL mmap %" PRIu64 " MiB: %s\n", mib, strerror(errno));
    Emit(line);
    return 1;
  }
  uint64_t t0 = NowMs(CLOCK_MONOTONIC);
  Fill(mem, pages, seed);
  uint64_t t1 = NowMs(CLOCK_MONOTONIC);
  FormatTimes(times, sizeof(times));
  snprintf(line, sizeof(line), "memcheck filled mib=%" PRIu64 " fill_ms=%" PRIu64 " %s\n", mib, t1 - t0, times);
  Emit(line);

  if (corrupt < pages * kPageSize) ((volatile uint8_t*)mem)[corrupt] ^= 0x5a;

  int disk_fd = -1;
  uint8_t* disk_buf = NULL;
  uint64_t last_pass = 0;
  uint32_t last_sum = 0;
  if (disk != NULL) {
    // O_DIRECT: the records go to the virtual disk, not to the guest's page cache (which is memory).
    disk_fd = open(disk, O_RDWR | O_DIRECT | O_SYNC);
    if (disk_fd < 0 || posix_memalign((void**)&disk_buf, kPageSize, kPageSize) != 0) {
      snprintf(line, sizeof(line), "memcheck FATAL disk %s: %s\n", disk, strerror(errno));
      Emit(line);
      return 1;
    }
  }

  uint64_t any_bad = 0;
  for (uint64_t pass = 1; max_passes == 0 || pass <= max_passes; pass++) {
    struct PassResult r;
    uint64_t start = NowMs(CLOCK_MONOTONIC);
    Pass(mem, pages, seed, pass - 1, &r);
    uint64_t pass_ms = NowMs(CLOCK_MONOTONIC) - start;
    uint32_t sum32 = (uint32_t)(r.sum ^ (r.sum >> 32));
    char disk_verdict[160] = "";
    int disk_bad = 0;
    if (disk_fd >= 0) {
      char v[150];
      DiskJournal(disk_fd, disk_buf, seed, pass, sum32, last_pass, last_sum, v, sizeof(v), &disk_bad);
      snprintf(disk_verdict, sizeof(disk_verdict), " %s", v);
      if (!disk_bad) {
        last_pass = pass;
        last_sum = sum32;
      }
    }
    FormatTimes(times, sizeof(times));
    if (disk_bad) any_bad++;
    if (r.bad_pages == 0) {
      snprintf(line, sizeof(line),
               "memcheck pass=%" PRIu64 " gen=%" PRIu64 " mib=%" PRIu64 " sum=0x%08" PRIx32 " OK pass_ms=%" PRIu64
               "%s %s\n",
               pass, pass, mib, sum32, pass_ms, disk_verdict, times);
    } else {
      any_bad++;
      snprintf(line, sizeof(line),
               "memcheck pass=%" PRIu64 " gen=%" PRIu64 " mib=%" PRIu64 " sum=0x%08" PRIx32
               " BAD first_bad_offset=0x%" PRIx64 " bad_pages=%" PRIu64 " expected=0x%016" PRIx64
               " got=0x%016" PRIx64 " pass_ms=%" PRIu64 " %s\n",
               pass, pass, mib, sum32, r.first_bad_offset, r.bad_pages, r.first_expected, r.first_got, pass_ms,
               times);
    }
    Emit(line);
    if (interval_ms > 0) {
      struct timespec ts = {(time_t)(interval_ms / 1000), (long)(interval_ms % 1000) * 1000000L};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
  }
  if (disk_fd >= 0) close(disk_fd);
  free(disk_buf);
  munmap(mem, pages * kPageSize);
  return any_bad ? 1 : 0;
}
