/* A C consumer built with pkg-config against the installed tree: writes a checkpoint, reads it back, and restores
 * it lazily into memory of its own through userfaultfd, comparing every byte. Exits 77 (and says why) only when
 * this machine does not allow userfaultfd, after everything else has passed. */
#define _GNU_SOURCE
#include <halite/halite_c.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

enum { kPages = 64 };

/* Page p's content: stored pages carry a pattern of their index; every 5th page is zero, page 7 absent. */
static void Expected(uint64_t p, unsigned char* out) {
  if (p % 5 == 0 || p == 7) {
    memset(out, 0, HLT_PAGE_SIZE);
    return;
  }
  for (size_t i = 0; i < HLT_PAGE_SIZE; ++i) out[i] = (unsigned char)((p * 131 + i / 64) & 0xff);
}

static int Fail(const char* what, int rc) {
  fprintf(stderr, "c consumer: %s: %s (%s)\n", what, hlt_strerror(rc), hlt_last_error());
  return 1;
}

/* Restores `r` lazily into `mem` (kPages pages) with the loader on or off, then checks every byte. */
static int LazyRestore(const hlt_reader* r, unsigned char* mem, int loader) {
  hlt_restore* rs;
  int rc;
  if ((rc = hlt_restore_create(r, &rs)) != 0) return Fail("hlt_restore_create", rc);
  if ((rc = hlt_restore_set_param(rs, HLT_RESTORE_BACKGROUND_LOADER, loader)) != 0) return Fail("set_param", rc);
  if (hlt_restore_set_param(rs, HLT_RESTORE_ZERO_WINDOW_PAGES, 3) != HLT_EINVAL) return Fail("window 3 accepted", 0);
  if (hlt_restore_set_param(rs, (hlt_restore_param)999, 1) != HLT_EINVAL) return Fail("unknown param accepted", 0);
  void* bases[1] = {mem};
  if ((rc = hlt_restore_start(rs, bases, 1)) != 0) return Fail("hlt_restore_start", rc);
  if (hlt_restore_set_param(rs, HLT_RESTORE_LOADER_RATE, 1) != HLT_EINVAL) return Fail("set after start", 0);
  if (hlt_restore_region_base(rs, 0) != mem) return Fail("region base is not the caller's memory", 0);
  if (loader && (rc = hlt_restore_wait(rs)) != 0) return Fail("hlt_restore_wait", rc);
  unsigned char want[HLT_PAGE_SIZE];
  for (uint64_t p = 0; p < kPages; ++p) {
    Expected(p, want);
    if (memcmp(mem + p * HLT_PAGE_SIZE, want, HLT_PAGE_SIZE) != 0) {
      fprintf(stderr, "c consumer: page %llu differs after the lazy restore\n", (unsigned long long)p);
      return 1;
    }
  }
  uint64_t blocks = 0, demand = 0, loader_blocks = 0, done = 0, uffd_faults = 0;
  hlt_restore_get_stat(rs, HLT_RESTORE_STAT_BLOCKS_TOTAL, &blocks);
  hlt_restore_get_stat(rs, HLT_RESTORE_STAT_BLOCKS_READ_DEMAND, &demand);
  hlt_restore_get_stat(rs, HLT_RESTORE_STAT_BLOCKS_READ_LOADER, &loader_blocks);
  hlt_restore_get_stat(rs, HLT_RESTORE_STAT_LOADER_DONE, &done);
  hlt_restore_get_stat(rs, HLT_RESTORE_STAT_UFFD_FAULTS, &uffd_faults);
  if (hlt_restore_get_stat(rs, (hlt_restore_stat)999, &done) != HLT_EINVAL) return Fail("unknown stat accepted", 0);
  /* Loader off: every block came in by a fault of this thread. Loader on: the loader finished the stream. */
  if (!loader && (demand != blocks || uffd_faults == 0)) {
    fprintf(stderr, "c consumer: loader off: %llu of %llu blocks read on demand, %llu faults\n",
            (unsigned long long)demand, (unsigned long long)blocks, (unsigned long long)uffd_faults);
    return 1;
  }
  if (loader && (done != 1 || demand + loader_blocks != blocks)) {
    fprintf(stderr, "c consumer: loader on: done %llu, %llu demand + %llu loader of %llu blocks\n",
            (unsigned long long)done, (unsigned long long)demand, (unsigned long long)loader_blocks,
            (unsigned long long)blocks);
    return 1;
  }
  printf("c consumer: lazy restore, loader %s: %llu blocks (%llu on demand), %llu userfaultfd faults, every byte "
         "matches\n",
         loader ? "on" : "off", (unsigned long long)blocks, (unsigned long long)demand,
         (unsigned long long)uffd_faults);
  hlt_restore_destroy(rs);
  return 0;
}

static int fetch_calls = 0;
static unsigned char fetch_key[32];
/* A VMM's key service: answers with the one key it holds. */
static int Fetch(void* ctx, const uint8_t* key_id, uint8_t* key_out) {
  (void)ctx;
  (void)key_id;
  ++fetch_calls;
  memcpy(key_out, fetch_key, sizeof fetch_key);
  return 0;
}

/* An encrypted checkpoint (format-spec 13): refused without its key, naming its key id; read with a keyring or a
 * fetch function; restored lazily like any other. */
static int Encrypted(const char* path) {
  unsigned char key[32], page[HLT_PAGE_SIZE], back[HLT_PAGE_SIZE];
  for (int i = 0; i < 32; ++i) key[i] = (unsigned char)(0xa0 + i);
  uint8_t id[16], file_id[16];
  int cipher = -1, rc;
  if ((rc = hlt_key_id(key, sizeof key, id)) != 0) return Fail("hlt_key_id", rc);
  hlt_writer* w;
  uint32_t region;
  if ((rc = hlt_writer_create(path, &w)) != 0) return Fail("hlt_writer_create (encrypted)", rc);
  if ((rc = hlt_writer_set_param(w, HLT_WRITER_BLOCK_PAGES, 4)) != 0) return Fail("HLT_WRITER_BLOCK_PAGES", rc);
  if ((rc = hlt_writer_set_encryption_key(w, key, sizeof key, HLT_CIPHER_XCHACHA20POLY1305)) != 0) {
    return Fail("hlt_writer_set_encryption_key", rc);
  }
  if ((rc = hlt_writer_add_region(w, "ram", 0, kPages * HLT_PAGE_SIZE, &region)) != 0) return Fail("add_region", rc);
  if (hlt_writer_set_encryption_key(w, key, sizeof key, 0) != HLT_EINVAL) return Fail("key after a region", 0);
  for (uint64_t p = 0; p < kPages; ++p) {
    if (p == 7) continue;
    Expected(p, page);
    if ((rc = hlt_writer_put_page(w, region, p, page)) != 0) return Fail("put_page (encrypted)", rc);
  }
  if ((rc = hlt_writer_finish(w)) != 0) return Fail("hlt_writer_finish (encrypted)", rc);
  hlt_reader* r;
  if (hlt_reader_open(path, &r) != HLT_EAUTH) return Fail("an encrypted checkpoint opened without its key", 0);
  char hex[33];
  for (int i = 0; i < 16; ++i) snprintf(hex + 2 * i, 3, "%02x", id[i]);
  if (!strstr(hlt_last_error(), hex)) return Fail("the refusal does not name the key id", 0);
  hlt_keyring* ring;
  if ((rc = hlt_keyring_create(&ring)) != 0 || (rc = hlt_keyring_add_key(ring, key, sizeof key, file_id)) != 0) {
    return Fail("hlt_keyring_add_key", rc);
  }
  if (memcmp(file_id, id, sizeof id) != 0) return Fail("hlt_keyring_add_key gave another id than hlt_key_id", 0);
  if ((rc = hlt_reader_open_keyed(path, NULL, 0, ring, &r)) != 0) return Fail("hlt_reader_open_keyed", rc);
  hlt_keyring_free(ring); /* the reader holds its own reference */
  uint8_t got[16];
  if (hlt_reader_encryption(r, &cipher, got) != 1 || cipher != HLT_CIPHER_XCHACHA20POLY1305 || memcmp(got, id, 16)) {
    return Fail("hlt_reader_encryption", 0);
  }
  Expected(9, page);
  if ((rc = hlt_reader_read_page(r, 0, 9, back)) != 0 || memcmp(page, back, sizeof page) != 0) {
    return Fail("read_page (encrypted)", rc);
  }
  if (hlt_restore_probe() == 0) {
    unsigned char* mem = mmap(NULL, kPages * HLT_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED || LazyRestore(r, mem, 1) != 0) return 1;
    munmap(mem, kPages * HLT_PAGE_SIZE);
  }
  hlt_reader_close(r);
  memcpy(fetch_key, key, sizeof key);
  if ((rc = hlt_keyring_create(&ring)) != 0 || (rc = hlt_keyring_set_fetch(ring, Fetch, NULL)) != 0) {
    return Fail("hlt_keyring_set_fetch", rc);
  }
  for (int i = 0; i < 2; ++i) {
    if ((rc = hlt_reader_open_keyed(path, NULL, 0, ring, &r)) != 0) return Fail("open with a fetch function", rc);
    hlt_reader_close(r);
  }
  hlt_keyring_free(ring);
  if (fetch_calls != 1) return Fail("the fetch function was not asked exactly once", 0);
  printf("c consumer: encrypted checkpoint refused without its key, read with a keyring and a fetch function\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  hlt_writer* w;
  uint32_t region;
  unsigned char page[HLT_PAGE_SIZE], back[HLT_PAGE_SIZE];
  if (hlt_writer_create(argv[1], &w) != 0) return 1;
  /* several blocks, so faults and the loader both have work */
  if (hlt_writer_set_param(w, HLT_WRITER_BLOCK_PAGES, 4) != 0) return 1;
  if (hlt_writer_add_region(w, "ram", 0, kPages * HLT_PAGE_SIZE, &region) != 0) return 1;
  for (uint64_t p = 0; p < kPages; ++p) {
    if (p == 7) continue; /* absent */
    Expected(p, page);
    if (hlt_writer_put_page(w, region, p, page) != 0) return 1;
  }
  if (hlt_writer_finish(w) != 0) return 1;
  hlt_reader* r;
  if (hlt_reader_open(argv[1], &r) != 0) return 1;
  int kind;
  uint32_t block, slot;
  if (hlt_reader_lookup(r, 0, 1, &kind, &block, &slot) != 0 || kind != HLT_PAGE_STORED) return 1;
  Expected(1, page);
  if (hlt_reader_read_page(r, 0, 1, back) != 0 || memcmp(page, back, sizeof page) != 0) return 1;
  int rc = hlt_reader_read_page(r, 0, 999, back);
  if (rc != HLT_EINVAL || strlen(hlt_last_error()) == 0) return 1;
  hlt_reader* missing;
  if (hlt_reader_open("/nonexistent/x.hlt", &missing) != HLT_EIO) return 1;
  printf("c consumer: reader and writer OK (%s: %s)\n", hlt_strerror(HLT_EIO), hlt_last_error());
  char encrypted_path[4096];
  snprintf(encrypted_path, sizeof encrypted_path, "%s.encrypted", argv[1]);
  if (Encrypted(encrypted_path) != 0) return 1;

  if ((rc = hlt_restore_probe()) != 0) {
    printf("SKIPPED: the lazy restore part needs userfaultfd: %s\n", hlt_last_error());
    hlt_reader_close(r);
    return 77;
  }
  for (int loader = 0; loader <= 1; ++loader) {
    unsigned char* mem = mmap(NULL, kPages * HLT_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 1;
    if (LazyRestore(r, mem, loader) != 0) return 1;
    munmap(mem, kPages * HLT_PAGE_SIZE);
  }
  hlt_reader_close(r);
  printf("c consumer: OK\n");
  return 0;
}
