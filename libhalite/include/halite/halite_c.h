/* libhalite C API: for VMMs written in C (QEMU, Xen's tools).
 *
 * Opaque handles; every call returns 0 or a negative error code (HLT_E*); hlt_strerror() turns a code into text
 * and hlt_last_error() gives the detailed message of the calling thread's last failure (file, offset, what was
 * expected). A reader handle may be used from several threads at once; a writer handle from one thread. */
#ifndef HALITE_HALITE_C_H_
#define HALITE_HALITE_C_H_

#include <stddef.h>
#include <stdint.h>

#include "halite/export.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  HLT_OK = 0,
  HLT_EINVAL = -1,    /* bad argument */
  HLT_EIO = -2,       /* an I/O error (may be transient) */
  HLT_ECORRUPT = -3,  /* the checkpoint breaks the format */
  HLT_EUNSUPPORTED = -4,
  HLT_ENOTFOUND = -5,
  HLT_EAUTH = -6,
  HLT_EABORTED = -7,
  HLT_EINTERNAL = -8,
};

enum { HLT_PAGE_ABSENT = 0, HLT_PAGE_ZERO = 1, HLT_PAGE_STORED = 2 };

#define HLT_PAGE_SIZE 4096

typedef struct hlt_reader hlt_reader;
typedef struct hlt_writer hlt_writer;

/* Static text for a code. */
HALITE_EXPORT const char* hlt_strerror(int code);
/* The detailed message of this thread's last failed call ("" if none). Valid until the next call. */
HALITE_EXPORT const char* hlt_last_error(void);

/* --- keys of encrypted checkpoints (format-spec 13) ---
 * A keyring holds 32-byte keys by key id (16 bytes, derived from the key; a checkpoint's header names the id of
 * its key); the files of an incremental chain may use different keys. Thread-safe. */
typedef struct hlt_keyring hlt_keyring;
enum { HLT_CIPHER_AUTO = 0, HLT_CIPHER_AES256GCM = 1, HLT_CIPHER_XCHACHA20POLY1305 = 2 };
HALITE_EXPORT int hlt_keyring_create(hlt_keyring** out);
/* NULL is ignored. Keys are wiped. A reader opened with the keyring keeps its own reference: free it any time. */
HALITE_EXPORT void hlt_keyring_free(hlt_keyring* keyring);
/* Adds a key (key_len must be 32); *key_id (16 bytes, may be NULL) receives its id. */
HALITE_EXPORT int hlt_keyring_add_key(hlt_keyring* keyring, const void* key, size_t key_len, uint8_t* key_id);
/* Adds the keys of a keyring file ("KEY_ID KEY" lines of 32 and 64 hexadecimal digits, '#' comments). */
HALITE_EXPORT int hlt_keyring_add_file(hlt_keyring* keyring, const char* path);
/* Called, at most once per id, for a key id the keyring lacks (how a VMM asks its KMS): writes the 32-byte key to
 * key_out and returns 0, or returns a negative HLT_E* code. May be called from any thread that opens a reader. */
typedef int (*hlt_key_fetch_fn)(void* ctx, const uint8_t* key_id, uint8_t* key_out);
HALITE_EXPORT int hlt_keyring_set_fetch(hlt_keyring* keyring, hlt_key_fetch_fn fetch, void* ctx);
/* The key id of a key (key_len 32) into key_id[16]. */
HALITE_EXPORT int hlt_key_id(const void* key, size_t key_len, uint8_t* key_id);

/* --- reading --- */
/* Opens a checkpoint: a path, s3://BUCKET/KEY or rados://POOL/NAME. With HALITE_BLOCK_CACHE=DIR in the environment
   (HALITE_BLOCK_CACHE_SIZE=BYTES, default 8G), blocks read from an object store go through that host block cache
   (halite/block_cache.h); a cache directory that cannot be used fails the open. An encrypted checkpoint is read
   with the keys HALITE_ENCRYPT_KEY (a key, 64 hex digits) and HALITE_KEYRING (a keyring file) give; without its
   key it fails with HLT_EAUTH, hlt_last_error naming the key id it needs. */
HALITE_EXPORT int hlt_reader_open(const char* path, hlt_reader** out);
/* Same, for an incremental checkpoint whose parents moved: each parent is looked for at the path its child records,
   then in parent_dirs[0..parent_dir_count) in order (format-spec 12). The strings are copied. */
HALITE_EXPORT int hlt_reader_open_chain(const char* path, const char* const* parent_dirs, size_t parent_dir_count,
                                        hlt_reader** out);
/* Same as hlt_reader_open_chain, with the keys of `keyring` (may be NULL) besides those of the environment. */
HALITE_EXPORT int hlt_reader_open_keyed(const char* path, const char* const* parent_dirs, size_t parent_dir_count,
                                        const hlt_keyring* keyring, hlt_reader** out);
/* Whether the checkpoint is encrypted (1) or not (0): *cipher (HLT_CIPHER_*) and key_id[16] (may be NULL). */
HALITE_EXPORT int hlt_reader_encryption(const hlt_reader* r, int* cipher, uint8_t* key_id);
HALITE_EXPORT void hlt_reader_close(hlt_reader* r);
HALITE_EXPORT uint32_t hlt_reader_region_count(const hlt_reader* r);
/* Region i's name (owned by the reader), guest-physical base, size in bytes. */
HALITE_EXPORT int hlt_reader_region(const hlt_reader* r, uint32_t i, const char** name, uint64_t* base, uint64_t* size);
HALITE_EXPORT uint32_t hlt_reader_block_count(const hlt_reader* r);
/* Bytes a block decompresses to (page_count * 4096). */
HALITE_EXPORT uint64_t hlt_reader_block_size(const hlt_reader* r, uint32_t block);
/* Where page `page` of region `region` lives: *kind is HLT_PAGE_*, *block and *slot valid for STORED. */
HALITE_EXPORT int hlt_reader_lookup(const hlt_reader* r, uint32_t region, uint64_t page, int* kind, uint32_t* block,
                      uint32_t* slot);
/* Reads, verifies and decompresses a block into buf (buf_len must equal hlt_reader_block_size). */
HALITE_EXPORT int hlt_reader_read_block(const hlt_reader* r, uint32_t block, void* buf, size_t buf_len);
/* Reads one page (zero and absent pages read as zeros) into buf[4096]. */
HALITE_EXPORT int hlt_reader_read_page(const hlt_reader* r, uint32_t region, uint64_t page, void* buf);
/* Reads the named blob into a malloc'ed buffer the caller frees. */
HALITE_EXPORT int hlt_reader_read_blob(const hlt_reader* r, const char* name, void** data, size_t* len);

/* --- writing --- */
typedef struct hlt_writer_options {
  uint32_t block_pages;  /* 0 = default */
  int level;             /* 0 = default */
  uint32_t threads;      /* 0 = one per CPU */
  uint64_t rate_limit_bytes_per_s;
  const char* policy;        /* NULL = "halite" */
  const char* machine_type;  /* may be NULL */
  uint32_t vmm_kind;         /* 0 raw, 1 QEMU, 2 Xen, 3 other */
} hlt_writer_options;

/* With HALITE_ENCRYPT_KEY (64 hex digits) in the environment, the checkpoint is encrypted with that key. */
HALITE_EXPORT int hlt_writer_create(const char* path, const hlt_writer_options* options, hlt_writer** out);
/* Encrypts the checkpoint with `key` (key_len 32) and `cipher` (HLT_CIPHER_*): every page, blob and content-revealing
 * index section, and the pages staged before finish (format-spec 13). Only before the first region is added. */
HALITE_EXPORT int hlt_writer_set_encryption_key(hlt_writer* w, const void* key, size_t key_len, int cipher);
/* Adds a region; *region_out receives its index. */
HALITE_EXPORT int hlt_writer_add_region(hlt_writer* w, const char* name, uint64_t base, uint64_t size, uint32_t* region_out);
HALITE_EXPORT int hlt_writer_put_page(hlt_writer* w, uint32_t region, uint64_t page, const void* data);
HALITE_EXPORT int hlt_writer_put_zero_pages(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count);
/* Save-time access hint: pages in the order the guest touched them. */
HALITE_EXPORT int hlt_writer_add_accessed(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count);
HALITE_EXPORT int hlt_writer_add_blob(hlt_writer* w, const char* name, const void* data, size_t len);
/* Writes everything and puts the file in place. The writer is freed whatever the result. */
HALITE_EXPORT int hlt_writer_finish(hlt_writer* w);
/* Discards everything (no file is left). */
HALITE_EXPORT void hlt_writer_abort(hlt_writer* w);

/* --- lazy restore into the caller's memory (userfaultfd) ---
 *
 * A C VMM restores a guest lazily: the guest runs at once on memory that is filled on first touch, one locality
 * block per fault, while a background loader streams the rest in the checkpoint's restore order.
 *
 *   hlt_restore* rs;
 *   hlt_restore_create(reader, &rs);                          // reader must outlive rs
 *   hlt_restore_set_param(rs, HLT_RESTORE_LOADER_RATE, 64 << 20);
 *   hlt_restore_start(rs, bases, region_count);               // your guest RAM, one mapping per region
 *   ... run the guest ...
 *   hlt_restore_wait(rs);                                     // every stored page is in
 *   hlt_restore_get_stat(rs, HLT_RESTORE_STAT_FAULTS_BLOCKING, &n);
 *   hlt_restore_destroy(rs);                                  // memory becomes ordinary memory again
 *
 * Parameters and statistics are set and read one at a time by enum (zstd's ZSTD_CCtx_setParameter style): a later
 * version adds values without changing any structure, so the ABI stays stable. Unknown values are HLT_EINVAL.
 * Thread-safety: hlt_restore_get_stat from any thread; everything else from one controlling thread. */
typedef struct hlt_restore hlt_restore;

typedef enum hlt_restore_param {
  HLT_RESTORE_BACKGROUND_LOADER = 1,     /* 1 (default): stream the blocks not asked for; 0: faults only */
  HLT_RESTORE_LOADER_RATE = 2,           /* bytes of stored payload per second the loader reads; 0 = unlimited */
  HLT_RESTORE_PRELOAD_WORKING_SET = 3,   /* 1: start loads the working set before it returns; default 0 */
  HLT_RESTORE_PRELOAD_ALL = 4,           /* 1: start loads everything before it returns (eager); default 0 */
  HLT_RESTORE_HANDLER_THREADS = 5,       /* threads reading faults, 1..64; default 4 */
  HLT_RESTORE_ZERO_WINDOW_PAGES = 6,     /* zero pages installed around a zero fault, power of two 1..512 */
  HLT_RESTORE_PREDICT_SEGMENT_PAGES = 7, /* Twinkle demand prediction: segment size in pages; 0 = off */
  HLT_RESTORE_PREDICT_THRESHOLD = 8,     /* faults in a segment before the rest of it is fetched */
  HLT_RESTORE_MAX_READ_ATTEMPTS = 9,     /* attempts per block read on transient I/O errors, >= 1 */
} hlt_restore_param;

typedef enum hlt_restore_stat {
  HLT_RESTORE_STAT_FAULTS_BLOCKING = 1, /* faults that waited for their block */
  HLT_RESTORE_STAT_FAULTS_ZERO = 2,     /* faults on zero or absent pages (no I/O) */
  HLT_RESTORE_STAT_FAULTS_PRESENT = 3,  /* faults on pages already in */
  HLT_RESTORE_STAT_FAULTS_FAILED = 4,
  HLT_RESTORE_STAT_BLOCKS_TOTAL = 5,
  HLT_RESTORE_STAT_BLOCKS_READ = 6,
  HLT_RESTORE_STAT_BLOCKS_READ_DEMAND = 7,
  HLT_RESTORE_STAT_BLOCKS_READ_LOADER = 8,
  HLT_RESTORE_STAT_BYTES_READ = 9,      /* stored payload bytes read from the checkpoint */
  HLT_RESTORE_STAT_PAGES_INSTALLED = 10,
  HLT_RESTORE_STAT_ZERO_PAGES_INSTALLED = 11,
  HLT_RESTORE_STAT_UFFD_FAULTS = 12,    /* page faults the kernel reported */
  HLT_RESTORE_STAT_LOADER_DONE = 13,    /* 1 once the loader went through every block */
} hlt_restore_stat;

/* 0 when userfaultfd can be used by this process; HLT_EUNSUPPORTED otherwise (hlt_last_error says why and what
 * would enable it, e.g. vm.unprivileged_userfaultfd=1). */
HALITE_EXPORT int hlt_restore_probe(void);
/* A restore of `reader`'s memory with default parameters. `reader` is borrowed and must outlive *out. */
HALITE_EXPORT int hlt_restore_create(const hlt_reader* reader, hlt_restore** out);
/* Sets one parameter; only before hlt_restore_start (HLT_EINVAL after, or for an unknown parameter or value). */
HALITE_EXPORT int hlt_restore_set_param(hlt_restore* rs, hlt_restore_param param, int64_t value);
/* Registers guest memory and starts serving it. `bases` holds one mapping per region of the checkpoint
 * (hlt_reader_region gives each size), page-aligned, private anonymous or shared memfd memory, which the caller
 * keeps mapped until hlt_restore_destroy; pages already populated are left as they are. With bases == NULL the
 * library maps anonymous memory itself (hlt_restore_region_base gives it). Runs a requested preload, then returns:
 * the guest may run. Errors: HLT_EUNSUPPORTED (no userfaultfd), HLT_EINVAL (count or alignment), HLT_EIO,
 * HLT_ECORRUPT (a preloaded block failed verification). */
HALITE_EXPORT int hlt_restore_start(hlt_restore* rs, void* const* bases, uint32_t base_count);
/* The memory of region i (the caller's mapping, or the library's); NULL before start or for a bad index. */
HALITE_EXPORT void* hlt_restore_region_base(const hlt_restore* rs, uint32_t region);
/* Blocks until the loader has gone through every block (every stored page is then in; zero pages still come on
 * first touch); at once when the loader is off. Returns 0, or the first error the loader met (the blocks it could
 * not load fail their faults). */
HALITE_EXPORT int hlt_restore_wait(hlt_restore* rs);
/* One statistic, read at any time after create. */
HALITE_EXPORT int hlt_restore_get_stat(const hlt_restore* rs, hlt_restore_stat stat, uint64_t* value);
/* Stops serving and frees everything; the memory becomes ordinary memory (pages never restored read as zero).
 * NULL is ignored. */
HALITE_EXPORT void hlt_restore_destroy(hlt_restore* rs);

#ifdef __cplusplus
}
#endif

#endif /* HALITE_HALITE_C_H_ */
