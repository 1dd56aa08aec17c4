/* libhalite C API: for VMMs written in C (QEMU, Xen's tools).
 *
 * Opaque handles; every call returns 0 or a negative error code (HLT_E*); hlt_strerror() turns a code into text
 * and hlt_last_error() gives the detailed message of the calling thread's last failure (file, offset, what was
 * expected): the message the tools print after "hlt-restore info: " and the like. A reader handle may be used from
 * several threads at once; a writer handle from one thread. Options are set one at a time by enum (hlt_*_set_param,
 * hlt_*_set_string) and figures read the same way (hlt_*_get_stat, hlt_reader_get_info): no public structure, so
 * later versions add values without breaking the ABI (libhalite.so.1).
 *
 * This header is libhalite.so's: checkpoints (files, s3://, rados://), keys, the block cache, info, verify,
 * parents, raw saves, QEMU saves, restore sessions into QEMU and libvirt domains (lazy, eager, shared, clone,
 * resume) and lazy restore into the caller's memory. Saving libvirt domains, detached sessions and the image server
 * are designed in halite_vmm.h, not built yet. Clean C99 for cffi: no
 * macro in a declaration besides HALITE_EXPORT. */
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

/* --- opening with options: block cache, keys, parents (the tools' reader flags) ---
 * Paths are files, s3://BUCKET/KEY (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL) or
 * rados://POOL/NAME (ceph.conf from CEPH_CONF). An options handle may be used for any number of opens; a reader
 * keeps what it needs, so the handle may be freed any time. */
typedef struct hlt_open_options hlt_open_options;
typedef enum hlt_open_param {
  HLT_OPEN_BLOCK_CACHE_SIZE = 1,  /* --block-cache-size: bytes; 0 (default): HALITE_BLOCK_CACHE_SIZE or 8 GiB */
  HLT_OPEN_WITHOUT_KEY = 2,       /* 1: open an encrypted file without its key (info and verify only, 13.7) */
  HLT_OPEN_MAX_CHAIN_DEPTH = 3,   /* parent links accepted, 0..16; default 16 */
  HLT_OPEN_ENVIRONMENT = 4        /* 1 (default): HALITE_BLOCK_CACHE*, HALITE_ENCRYPT_KEY, HALITE_KEYRING apply */
} hlt_open_param;
typedef enum hlt_open_string {
  HLT_OPEN_BLOCK_CACHE_DIR = 1,   /* --block-cache: the host block cache for s3:// and rados:// blocks */
  HLT_OPEN_PARENT_DIR = 2,        /* --parent-dir: appends a directory where moved parents are looked for */
  HLT_OPEN_MAC_KEY_FILE = 3,      /* --key-file: the checkpoint must be authenticated with this key */
  HLT_OPEN_KEY_FILE = 4,          /* --encrypt-key-file: a key (64 hex digits) for encrypted files (adds) */
  HLT_OPEN_KEYRING_FILE = 5       /* --keyring: a keyring file (adds) */
} hlt_open_string;
HALITE_EXPORT int hlt_open_options_create(hlt_open_options** out);
HALITE_EXPORT void hlt_open_options_free(hlt_open_options* options);
HALITE_EXPORT int hlt_open_options_set_param(hlt_open_options* options, hlt_open_param param, int64_t value);
/* Files named are read here (errors name them); the block cache is opened at each open. */
HALITE_EXPORT int hlt_open_options_set_string(hlt_open_options* options, hlt_open_string option, const char* value);
/* Keys looked up before the files' and the environment's. The keyring may be freed after. */
HALITE_EXPORT int hlt_open_options_set_keyring(hlt_open_options* options, const hlt_keyring* keyring);
/* Opens a checkpoint with `options` (NULL: as hlt_reader_open). */
HALITE_EXPORT int hlt_reader_open_with(const char* path, const hlt_open_options* options, hlt_reader** out);

/* --- info (hlt-restore info) --- */
typedef enum hlt_info {
  HLT_INFO_FORMAT_MAJOR = 1,
  HLT_INFO_FORMAT_MINOR = 2,
  HLT_INFO_FILE_SIZE = 3,         /* bytes of this file (not its parents) */
  HLT_INFO_PAGES = 4,             /* pages of the regions */
  /* The page counts partition HLT_INFO_PAGES: stored + zero + absent. Stored pages include duplicates (pages
     that share another's slot); hlt_writer_stat's STORED_PAGES counts distinct ones. All are 0 on a reader
     opened without its key. */
  HLT_INFO_STORED_PAGES = 5,
  HLT_INFO_DUPLICATE_PAGES = 6,   /* of the stored pages: those whose content is another's slot */
  HLT_INFO_ZERO_PAGES = 7,
  HLT_INFO_ABSENT_PAGES = 8,
  HLT_INFO_RAW_BYTES = 9,
  HLT_INFO_BLOCKS = 10,
  HLT_INFO_COMPRESSED_BLOCKS = 11,
  HLT_INFO_FRAMED_BLOCKS = 12,
  HLT_INFO_DICTIONARY_BLOCKS = 13,
  HLT_INFO_HOT_BLOCKS = 14,
  HLT_INFO_BLOCK_BYTES = 15,
  HLT_INFO_BLOBS = 16,
  HLT_INFO_BLOB_BYTES = 17,
  HLT_INFO_DICTIONARY_BYTES = 18,
  HLT_INFO_INDEX_BYTES = 19,
  HLT_INFO_RESTORE_ORDER_BLOCKS = 20,
  HLT_INFO_WORKING_SET_BLOCKS = 21,
  HLT_INFO_CHAIN_DEPTH = 22,      /* parent links below this file; 0 for a full checkpoint */
  HLT_INFO_AUTHENTICATED = 23,
  HLT_INFO_ENCRYPTED = 24,
  HLT_INFO_SEALED = 25,           /* opened without its key */
  HLT_INFO_PAGE_HASHES = 26,
  HLT_INFO_VMM_KIND = 27,         /* 0 raw, 1 QEMU, 2 Xen, 3 other */
  HLT_INFO_CREATED_UNIX_NS = 28
} hlt_info;
/* One figure. The page counts take one pass over the page map, made at the first call that needs them. */
HALITE_EXPORT int hlt_reader_get_info(const hlt_reader* r, hlt_info what, uint64_t* value);
/* The JSON document `hlt-restore info --json` prints, NUL-terminated, into *json (free with hlt_free). */
HALITE_EXPORT int hlt_reader_info_json(const hlt_reader* r, char** json);
/* Frees what the library malloc'ed for the caller (hlt_reader_info_json, hlt_reader_read_blob). NULL is ignored. */
HALITE_EXPORT void hlt_free(void* p);

/* --- parents: the files of an incremental chain (format-spec 12), level 0 being the file opened --- */
typedef enum hlt_chain_info {
  HLT_CHAIN_FILE_SIZE = 1,
  HLT_CHAIN_FORMAT_MINOR = 2,
  HLT_CHAIN_DEPTH = 3,            /* parent links below this file */
  HLT_CHAIN_BLOCKS = 4,
  HLT_CHAIN_BLOCK_BYTES = 5,
  HLT_CHAIN_LIVE_BLOCKS = 6,      /* blocks of this file the checkpoint takes pages from */
  HLT_CHAIN_PAGES = 7,            /* pages of the checkpoint this file serves */
  HLT_CHAIN_BASED_BLOCKS = 8,
  HLT_CHAIN_DICTIONARY_BYTES = 9
} hlt_chain_info;
/* Files of the chain: 1 for a full checkpoint. */
HALITE_EXPORT uint32_t hlt_reader_chain_length(const hlt_reader* r);
/* Level `level`'s name (the path it was opened at; owned by the reader), how it names its parent ("" for the last
 * file, a full checkpoint) and its file id (file_id[16]); each out pointer may be NULL. */
HALITE_EXPORT int hlt_reader_chain_file(const hlt_reader* r, uint32_t level, const char** name,
                                        const char** parent_path_hint, uint8_t* file_id);
HALITE_EXPORT int hlt_reader_chain_get(const hlt_reader* r, uint32_t level, hlt_chain_info what, uint64_t* value);

/* --- verify (hlt-restore verify) and storage statistics --- */
/* Called from the verifying thread now and then with the blocks done and the total. */
typedef void (*hlt_progress_fn)(void* ctx, uint64_t done, uint64_t total);
/* Reads and checks every block and blob of every file of the chain, every rule and every page hash (on a reader
 * opened without its key: the structure and every payload's checksum). progress may be NULL. 0, or the first
 * failure (HLT_ECORRUPT, HLT_EAUTH, HLT_EIO) with hlt_last_error naming the file, the offset and what was expected. */
HALITE_EXPORT int hlt_reader_verify(const hlt_reader* r, hlt_progress_fn progress, void* ctx);
typedef enum hlt_reader_stat {
  HLT_READER_STAT_STORAGE_REQUESTS = 1,  /* requests sent to storage since open */
  HLT_READER_STAT_STORAGE_BYTES = 2,
  HLT_READER_STAT_BLOCKS_FETCHED = 3,    /* block payloads read from storage */
  HLT_READER_STAT_BLOCK_BYTES_FETCHED = 4,
  HLT_READER_STAT_CACHE_HITS = 5,        /* block payloads the block cache served */
  HLT_READER_STAT_CACHE_MISSES = 6,
  HLT_READER_STAT_CACHE_DROPPED = 7,     /* damaged cache entries dropped */
  HLT_READER_STAT_CACHE_INSERTS = 8
} hlt_reader_stat;
/* One storage statistic; any thread, any time. */
HALITE_EXPORT int hlt_reader_get_stat(const hlt_reader* r, hlt_reader_stat stat, uint64_t* value);

/* --- writing ---
 * A writer is made with its defaults, set one option at a time (hlt_writer_set_param, hlt_writer_set_string), and
 * then given regions, pages, hints and blobs. Options are accepted until the first region is added (HLT_EINVAL
 * after). The same options as hlt-save's writer flags, named after them. Thread-safety: one thread per writer. */
typedef enum hlt_writer_param {
  HLT_WRITER_BLOCK_PAGES = 1,          /* --block-pages: pages per locality block, 1..4096; default 64 */
  HLT_WRITER_LEVEL = 2,                /* --level: zstd level; default 3 */
  HLT_WRITER_THREADS = 3,              /* --threads: compression workers, 0 (default) = one per CPU, ..1024 */
  HLT_WRITER_RATE_LIMIT = 4,           /* --rate-limit: raw bytes compressed per second; 0 (default) = unlimited */
  HLT_WRITER_VMM_KIND = 5,             /* 0 raw (default), 1 QEMU, 2 Xen, 3 other */
  HLT_WRITER_FRAME_PAGES = 6,          /* --frame-pages: pages per independent frame, 0..4096; -1 (default) = auto */
  HLT_WRITER_PAGE_HASHES = 7,          /* --page-hashes: 1 writes PAGE_HASHES (children compare cheaply); default 0 */
  HLT_WRITER_PARENT_CODING = 8,        /* --parent-coding: 1 (default) based, 0 plain */
  HLT_WRITER_REWRITE_PERMILLE = 9,     /* --rewrite-fraction x 1000: default 250 */
  HLT_WRITER_SYNC = 10,                /* 0 = --no-sync (no fsync before the rename); default 1 */
  HLT_WRITER_LOW_PRIORITY = 11,        /* 1: compression workers at nice 10 (a guest keeps running); default 0 */
  HLT_WRITER_CIPHER = 12,              /* --cipher: HLT_CIPHER_*; default HLT_CIPHER_AUTO */
  HLT_WRITER_ENCRYPTION = 13           /* 0 = --no-encryption: ignore HALITE_ENCRYPT_KEY; default 1 */
} hlt_writer_param;

typedef enum hlt_writer_string {
  HLT_WRITER_POLICY = 1,               /* --policy: halite (default), access, va, physical */
  HLT_WRITER_DICTIONARY = 2,           /* --dictionary: auto (default), on, off */
  HLT_WRITER_MACHINE_TYPE = 3,         /* recorded in the metadata */
  HLT_WRITER_CREATOR = 4,              /* recorded in the metadata; default "libhalite C API" */
  HLT_WRITER_STAGING_DIR = 5,          /* where pages are staged; default the output's directory */
  HLT_WRITER_MAC_KEY_FILE = 6,         /* --key-file: authenticate with the 32-byte key of this file */
  HLT_WRITER_ENCRYPT_KEY_FILE = 7,     /* --encrypt-key-file: encrypt with the key of this file */
  HLT_WRITER_PARENT = 8,               /* --parent: an incremental checkpoint of this one (path or URI) */
  HLT_WRITER_PARENT_DIR = 9,           /* --parent-dir: where the parent's own parents are looked for (appends) */
  HLT_WRITER_ACCESS_TRACE = 10,        /* --access-trace: a trace file, applied at finish */
  HLT_WRITER_VA_HINTS = 11             /* --va-hints: a VA hints file, applied at finish */
} hlt_writer_string;

typedef enum hlt_writer_stat {         /* after hlt_writer_commit; what hlt-save prints */
  HLT_WRITER_STAT_PAGES = 1,
  HLT_WRITER_STAT_ZERO_PAGES = 2,
  HLT_WRITER_STAT_ABSENT_PAGES = 3,
  HLT_WRITER_STAT_DUPLICATE_PAGES = 4,
  /* pages = zero + absent + duplicate + stored: here stored pages are distinct ones, each in a slot of its own
     (hlt_info's STORED_PAGES counts duplicates as stored too: it is this plus DUPLICATE_PAGES) */
  HLT_WRITER_STAT_STORED_PAGES = 5,
  HLT_WRITER_STAT_BLOCKS = 6,
  HLT_WRITER_STAT_HOT_BLOCKS = 7,
  HLT_WRITER_STAT_ACCESSED_PAGES = 8,
  HLT_WRITER_STAT_RAW_BYTES = 9,
  HLT_WRITER_STAT_FILE_BYTES = 10,
  HLT_WRITER_STAT_BLOCK_BYTES = 11,
  HLT_WRITER_STAT_BLOB_BYTES = 12,
  HLT_WRITER_STAT_INDEX_BYTES = 13,
  HLT_WRITER_STAT_DICTIONARY_BYTES = 14,
  HLT_WRITER_STAT_IN_PARENT_PAGES = 15,
  HLT_WRITER_STAT_FRAME_PAGES = 16,
  HLT_WRITER_STAT_ENCRYPTED = 17,
  HLT_WRITER_STAT_MICROSECONDS = 18
} hlt_writer_stat;

/* A writer of `path` (a file, s3://BUCKET/KEY or rados://POOL/NAME) with default options. Nothing is created
 * before the first region is added. With HALITE_ENCRYPT_KEY (64 hex digits) in the environment, the checkpoint is
 * encrypted with that key unless HLT_WRITER_ENCRYPTION is 0 or a key is set. */
HALITE_EXPORT int hlt_writer_create(const char* path, hlt_writer** out);
/* Sets one option; HLT_EINVAL for an unknown option, a value out of range, or after the first region. */
HALITE_EXPORT int hlt_writer_set_param(hlt_writer* w, hlt_writer_param param, int64_t value);
/* Sets one string option (copied); files named are read here, so errors name them. */
HALITE_EXPORT int hlt_writer_set_string(hlt_writer* w, hlt_writer_string option, const char* value);
/* Keys of the parent's chain (HLT_WRITER_PARENT), besides the environment's. The keyring may be freed after. */
HALITE_EXPORT int hlt_writer_set_keyring(hlt_writer* w, const hlt_keyring* keyring);
/* Encrypts the checkpoint with `key` (key_len 32) and `cipher` (HLT_CIPHER_*): every page, blob and content-revealing
 * index section, and the pages staged before finish (format-spec 13). Only before the first region is added. */
HALITE_EXPORT int hlt_writer_set_encryption_key(hlt_writer* w, const void* key, size_t key_len, int cipher);
/* Adds a region; *region_out receives its index. */
HALITE_EXPORT int hlt_writer_add_region(hlt_writer* w, const char* name, uint64_t base, uint64_t size, uint32_t* region_out);
HALITE_EXPORT int hlt_writer_put_page(hlt_writer* w, uint32_t region, uint64_t page, const void* data);
HALITE_EXPORT int hlt_writer_put_zero_pages(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count);
/* Uses the file `image_path` as the whole content of `region` (page p at offset p*4096; its size must equal the
 * region's), read in place at commit: hlt-save raw. The file must stay unchanged until commit returns. */
HALITE_EXPORT int hlt_writer_attach_image(hlt_writer* w, uint32_t region, const char* image_path);
/* Save-time access hint: pages in the order the guest touched them. */
HALITE_EXPORT int hlt_writer_add_accessed(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count);
HALITE_EXPORT int hlt_writer_add_blob(hlt_writer* w, const char* name, const void* data, size_t len);
/* Writes everything and puts the file in place; the writer stays for hlt_writer_get_stat and must be freed
 * (hlt_writer_free). A writer commits once; after a failure nothing is left under the name. */
HALITE_EXPORT int hlt_writer_commit(hlt_writer* w);
/* One figure of the committed checkpoint (HLT_EINVAL before a successful commit). */
HALITE_EXPORT int hlt_writer_get_stat(const hlt_writer* w, hlt_writer_stat stat, uint64_t* value);
/* Frees a writer; an uncommitted one leaves nothing behind. NULL is ignored. */
HALITE_EXPORT void hlt_writer_free(hlt_writer* w);
/* hlt_writer_commit then hlt_writer_free: the writer is freed whatever the result. */
HALITE_EXPORT int hlt_writer_finish(hlt_writer* w);
/* Discards everything (no file is left); same as hlt_writer_free. */
HALITE_EXPORT void hlt_writer_abort(hlt_writer* w);

/* hlt-save raw: adds the region "ram" (base 0) of the size of the raw memory image `image_path` (a non-zero multiple
 * of 4096 bytes) and attaches the image to it; then commit. */
HALITE_EXPORT int hlt_writer_add_raw_image(hlt_writer* w, const char* image_path, uint32_t* region_out);

/* --- saving a running QEMU guest (hlt-save qemu) ---
 * Built into libhalite.so with the QEMU integration (it needs no library beyond libhalite's own). `writer` is a
 * writer made by hlt_writer_create for the output, options set, no region added: the save adds the regions, pages,
 * hints and the device-state blob "qemu.state", commits it and leaves it for hlt_writer_get_stat and
 * hlt_writer_free (the caller still owns it). Thread-safety: one thread per save.
 *
 *   hlt_writer_create("vm.hlt", &w);
 *   hlt_qemu_save_create(w, "/run/vm/qmp.sock", &s);
 *   hlt_save_set_param(s, HLT_SAVE_THEN, HLT_SAVE_THEN_QUIT);
 *   hlt_save_run(s);                     // 0, or hlt_last_error says what hlt-save qemu would have printed
 *   hlt_save_free(s); hlt_writer_free(w); */
typedef struct hlt_save hlt_save;
typedef enum hlt_save_param {
  HLT_SAVE_LIVE = 1,        /* --live: background snapshot, the guest keeps running; default 0 */
  HLT_SAVE_THEN = 2,        /* --then: HLT_SAVE_THEN_*; default HLT_SAVE_THEN_CONT */
  HLT_SAVE_VA_WALK = 3,     /* 0 = --no-va: no page-table walk; default 1 */
  HLT_SAVE_TIMEOUT_MS = 4   /* connecting to QMP, and the whole stream; defaults 5000 and 600000 */
} hlt_save_param;
/* libvirt saves: CONT, STOP or DESTROY (the domain); QEMU saves: CONT, STOP or QUIT (QEMU). */
enum { HLT_SAVE_THEN_CONT = 0, HLT_SAVE_THEN_STOP = 1, HLT_SAVE_THEN_QUIT = 2, HLT_SAVE_THEN_DESTROY = 3 };
typedef enum hlt_save_string {
  HLT_SAVE_CONNECT = 2      /* libvirt: --connect URI; default libvirt's */
} hlt_save_string;
typedef enum hlt_save_stat {
  HLT_SAVE_STAT_RAMBLOCKS = 1,        /* regions */
  HLT_SAVE_STAT_DATA_PAGES = 2,       /* pages QEMU sent with content */
  HLT_SAVE_STAT_ZERO_PAGES = 3,
  HLT_SAVE_STAT_STREAM_BYTES = 4,
  HLT_SAVE_STAT_STREAM_US = 5,
  HLT_SAVE_STAT_GUEST_STOPPED_US = 6, /* stop to cont of a stopped-guest save (0 if it stays stopped) */
  HLT_SAVE_STAT_STATE_BLOB_BYTES = 7,
  HLT_SAVE_STAT_LIVE = 8,             /* 1: saved live */
  HLT_SAVE_STAT_TOTAL_US = 9
} hlt_save_stat;
/* A save of the QEMU whose QMP unix socket is `qmp_socket` into `writer` (borrowed: it must outlive the save). */
HALITE_EXPORT int hlt_qemu_save_create(hlt_writer* writer, const char* qmp_socket, hlt_save** out);
/* hlt-save libvirt: a save of running libvirt domain `domain` (its disks frozen with the memory, the checkpoint
 * made for hlt-restore libvirt and HLT_SESSION_LIBVIRT) into `writer` (borrowed, as above). Built with the libvirt
 * integration (HLT_EUNSUPPORTED at hlt_save_run otherwise). */
HALITE_EXPORT int hlt_libvirt_save_create(hlt_writer* writer, const char* domain, hlt_save** out);
HALITE_EXPORT int hlt_save_set_param(hlt_save* s, hlt_save_param param, int64_t value);
HALITE_EXPORT int hlt_save_set_string(hlt_save* s, hlt_save_string option, const char* value);
/* Saves; blocks until the checkpoint is committed (or nothing is left under its name). Once per save. */
HALITE_EXPORT int hlt_save_run(hlt_save* s);
/* One figure of a successful run (HLT_EINVAL before). */
HALITE_EXPORT int hlt_save_get_stat(const hlt_save* s, hlt_save_stat stat, uint64_t* value);
/* NULL is ignored. */
HALITE_EXPORT void hlt_save_free(hlt_save* s);

/* --- the host image server (halite-image-server serve, hlt-restore serve) ---
 * A checkpoint served as read-only image files that VMMs map privately (QEMU's memory-backend-file,share=off), so
 * that every clone on the host shares one copy of each page it has not written, decoded once. The server is
 * libhalite's own daemon, halite-image-server (installed in PREFIX/libexec/halite1 with libhalite.so), a process
 * of its own that outlives the handle: one per checkpoint and host, mounted at IMAGE_DIR/FILE_ID, where the
 * shared-memory restores (HLT_SESSION_MEMORY_SHARED) look for it. hlt_server_start finds the one serving the
 * checkpoint or starts it; region R of the checkpoint is the file MOUNT/ckpt.R ('/' in R reads %2f), and
 * MOUNT/.stats is a JSON document of its counters. A started server stops by itself once no file has been open
 * for HLT_SERVER_EXIT_WHEN_UNUSED seconds, or with hlt_server_stop. Thread-safety: one thread per handle.
 *
 *   hlt_server_create("golden.hlt", &srv);
 *   hlt_server_set_string(srv, HLT_SERVER_IMAGE_DIR, "/run/halite/images");
 *   hlt_server_start(srv);
 *   hlt_server_get_image(srv, "pc.ram", &path);    // QEMU: -object memory-backend-file,mem-path=PATH,share=off
 *   ...; hlt_server_stop(srv, 1, 10000); hlt_server_destroy(srv); */
typedef struct hlt_server hlt_server;
typedef enum hlt_server_param {
  HLT_SERVER_EXIT_WHEN_UNUSED = 1, /* seconds without an open file after which a started server stops by itself;
                                      0: never; default 30 (what shared-memory restores start) */
  HLT_SERVER_START_TIMEOUT = 2     /* seconds hlt_server_start waits for a started server's mount; default 15 */
} hlt_server_param;
typedef enum hlt_server_string {
  HLT_SERVER_IMAGE_DIR = 1, /* the servers' directory: this checkpoint's at IMAGE_DIR/FILE_ID; default
                               /run/halite/images (where restores look) */
  HLT_SERVER_PROGRAM = 2    /* the daemon; default halite-image-server installed with libhalite.so, else PATH */
} hlt_server_string;
/* A server of `checkpoint` (a file, s3:// or rados:// URI), not started yet. */
HALITE_EXPORT int hlt_server_create(const char* checkpoint, hlt_server** out);
/* Before hlt_server_start (HLT_EINVAL after, or for an unknown option or a bad value). */
HALITE_EXPORT int hlt_server_set_param(hlt_server* s, hlt_server_param param, int64_t value);
HALITE_EXPORT int hlt_server_set_string(hlt_server* s, hlt_server_string option, const char* value);
/* How the checkpoint is opened, here and by the server (copied): its block cache and size, parent directories,
 * key and keyring files; the environment is inherited. Keys given in memory (hlt_open_options_set_keyring) cannot
 * reach the server process: HLT_EINVAL at hlt_server_start. */
HALITE_EXPORT int hlt_server_set_open_options(hlt_server* s, const hlt_open_options* options);
/* Opens the checkpoint, then finds the server serving it under the image directory or starts one and waits for
 * its mount. Once per handle. Errors: the checkpoint's (HLT_EIO, HLT_ECORRUPT, HLT_EAUTH, ...), HLT_ENOTFOUND
 * (no daemon), HLT_EIO (a server that exits or does not come up: the message ends with its log). */
HALITE_EXPORT int hlt_server_start(hlt_server* s);
/* After a successful start. `mount` and `path` are owned by the handle and live until hlt_server_destroy. */
HALITE_EXPORT int hlt_server_get_mount(const hlt_server* s, const char** mount);
/* The image file of region `region` (HLT_ENOTFOUND when the checkpoint has no such region). */
HALITE_EXPORT int hlt_server_get_image(hlt_server* s, const char* region, const char** path);
/* The server's pid, and whether this handle started it (0: it was serving already). */
HALITE_EXPORT int hlt_server_get_pid(const hlt_server* s, uint64_t* pid, int* started);
/* Asks the server to stop (SIGTERM) and waits up to timeout_ms (-1: no bound) for it to unmount (or exit). While a
 * VMM maps one of its files the server refuses: HLT_EABORTED, unless `force` (a second SIGTERM, which it obeys: it
 * unmounts at once, and its process ends when the last VMM closes the files it still holds). HLT_EABORTED too
 * when it is still mounted after timeout_ms. */
HALITE_EXPORT int hlt_server_stop(hlt_server* s, int force, int64_t timeout_ms);
/* Frees the handle; the server goes on (it stops by itself once unused, or by hlt_server_stop). NULL is ignored. */
HALITE_EXPORT void hlt_server_destroy(hlt_server* s);

/* --- restoring a checkpoint into QEMU or a libvirt domain (hlt-restore qemu, hlt-restore libvirt) ---
 * Built into libhalite.so with the QEMU integration (halite::qemu::RestoreSession, what hlt-restore qemu runs). A
 * session launches QEMU with the caller's arguments plus `-incoming defer` and a QMP socket of its own (launch mode,
 * hlt_session_add_qemu_arg: `hlt-restore qemu CKPT -- ARGS`), or restores into a QEMU already waiting with
 * `-incoming defer` (HLT_SESSION_QMP_SOCKET: `--qmp`). Lazy by default: hlt_session_start returns once the guest
 * runs, its pages then come from the checkpoint on demand and in the background, from a thread of the session's
 * own; hlt_session_wait waits for the last one. The launched QEMU outlives the process after hlt_session_detach;
 * otherwise hlt_session_destroy kills it. A lazy restore whose process died (killed, crashed) leaves QEMU paused
 * with its guest frozen; a session with HLT_SESSION_RESUME and the same HLT_SESSION_QEMU_DIR (or QMP socket)
 * takes it over (`--resume`). Thread-safety: hlt_session_get_stat and hlt_session_next_event from any thread;
 * the rest from one controlling thread.
 *
 *   hlt_session_create(HLT_SESSION_QEMU, "vm.hlt", &s);
 *   hlt_session_set_string(s, HLT_SESSION_QEMU_DIR, "/run/vm1");       // QMP socket, logs, the resume record
 *   hlt_session_add_qemu_arg(s, "-m"); hlt_session_add_qemu_arg(s, "1G"); ...   // as the saved QEMU had them
 *   hlt_session_start(s);                  // the guest runs
 *   hlt_session_wait(s, -1);               // every page in
 *   hlt_session_detach(s); hlt_session_destroy(s); */
/* HLT_SESSION_LIBVIRT (halite::libvirt::RestoreDomain, what hlt-restore libvirt runs): the checkpoint of
 * `hlt-save libvirt` restored into a transient domain that libvirt starts and manages (HLT_SESSION_CONNECT), as the
 * saved domain or a clone (HLT_SESSION_CLONE: new name, UUID, MACs, VM generation ID, disk overlays in
 * HLT_SESSION_DISK_DIR). Lazy by default; HLT_SESSION_MEMORY_SHARED maps the guest RAM privately from the host's
 * image server (started when none serves the checkpoint, as HLT_SESSION_SERVER_PROGRAM's `serve` and
 * `serve-ram-dir` modes: the servers outlive the session). A lazy restore leaves a record ($HALITE_RUN_DIR, else
 * /run/halite/restores) so that, when its process dies, a session with HLT_SESSION_RESUME and
 * HLT_SESSION_DOMAIN_NAME takes it over. HLT_SESSION_STATUS_FILE is the JSON file a broker polls (starting,
 * running, completed or failed). The domain is libvirt's: hlt_session_destroy of a session still restoring waits
 * for the restore's end (it does not kill the guest), and the domain outlives the session with or without
 * hlt_session_detach. hlt_session_get_domain tells its name and UUID.
 *
 *   hlt_session_create(HLT_SESSION_LIBVIRT, "desk.hlt", &s);
 *   hlt_session_set_string(s, HLT_SESSION_CONNECT, "qemu:///system");
 *   hlt_session_set_param(s, HLT_SESSION_CLONE, 1);
 *   hlt_session_set_param(s, HLT_SESSION_MEMORY_SHARED, 1);
 *   hlt_session_set_string(s, HLT_SESSION_DISK_DIR, "/var/lib/clones");
 *   hlt_session_start(s); hlt_session_wait(s, -1); hlt_session_destroy(s);
 *
 * Why libvirt sessions are in libhalite.so and not in a libhalite-libvirt.so: the integrations are built on the
 * core's internals, which libhalite.so hides (-fvisibility=hidden, libhalite.map); a second shared library would
 * carry a copy of the core of its own, with its own thread-local hlt_last_error and its own idea of the
 * hlt_open_options and hlt_keyring handles passed across, and the one hlt_session handle would have to be split
 * by kind. The cost: libhalite1 depends on libvirt0, libxml2 and libfuse3-3 (the RAM directory server's
 * registration), found by dpkg-shlibdeps; a C VMM that only reads checkpoints loads them too. */
typedef struct hlt_session hlt_session;
typedef enum hlt_session_kind {
  HLT_SESSION_QEMU = 1,
  HLT_SESSION_LIBVIRT = 2        /* HLT_EUNSUPPORTED from hlt_session_create when built without libvirt */
} hlt_session_kind;
typedef enum hlt_session_param {
  HLT_SESSION_EAGER = 1,         /* 1 = --eager: every page before the guest runs; default 0 (lazy) */
  HLT_SESSION_MEMORY_SHARED = 2, /* 1 = --memory shared: guest RAM mapped from the host's image server (QEMU:
                                    launch mode); the device state goes eagerly. The server is given the open
                                    options' block cache and key/keyring files; keys set only in memory
                                    (hlt_open_options_set_keyring) are refused here (HLT_EINVAL) */
  HLT_SESSION_CLONE = 3,         /* libvirt: 1 = --clone: a new identity (name: HLT_SESSION_DOMAIN_NAME, default
                                    "<saved>-clone-<8 hex digits>") */
  HLT_SESSION_RESUME = 4,        /* 1 = --resume: take over a lazy restore of the checkpoint whose restorer died
                                    (libvirt: that of domain HLT_SESSION_DOMAIN_NAME) */
  HLT_SESSION_LOADER_RATE = 6,   /* --rate-limit: bytes per second the background loader reads; 0 unlimited */
  HLT_SESSION_START_PAUSED = 7   /* QEMU, eager: 1 leaves the guest paused after the load; libvirt (--paused): the
                                    guest stays paused until resumed (virsh resume) */
} hlt_session_param;
typedef enum hlt_session_string {
  HLT_SESSION_CONNECT = 1,       /* libvirt: --connect URI; default libvirt's */
  HLT_SESSION_DOMAIN_NAME = 2,   /* libvirt: --name of the domain restored (default the saved one's), or with
                                    HLT_SESSION_RESUME the domain whose restore to take over */
  HLT_SESSION_QMP_SOCKET = 3,    /* QEMU: --qmp: attach to this QEMU instead of launching one */
  HLT_SESSION_QEMU_BINARY = 4,   /* QEMU: --qemu: launch mode; default $HALITE_QEMU, else qemu-system-x86_64 */
  HLT_SESSION_QEMU_DIR = 5,      /* QEMU: --qemu-dir: launch mode (and resume): QMP socket, logs and the resume
                                    record; default a new private directory under $TMPDIR */
  HLT_SESSION_IMAGE_DIR = 6,     /* memory shared: --image-dir where image servers mount; default
                                    /run/halite/images */
  HLT_SESSION_STATUS_FILE = 7,   /* libvirt: --status-file: the restore's state as JSON (state, domain, uuid, pid) */
  HLT_SESSION_DISK_DIR = 8,      /* libvirt: --disk-dir for a restore's disk overlays; default beside the checkpoint */
  HLT_SESSION_RAM_DIR = 9,       /* libvirt, memory shared: libvirt's memory backing directory; default the URI's */
  HLT_SESSION_SERVER_PROGRAM = 10 /* memory shared: the program whose `serve` and `serve-ram-dir` modes are the image
                                    server and the RAM directory server; default the halite-image-server daemon
                                    installed with libhalite.so (PREFIX/libexec/halite1), else the first on PATH */
} hlt_session_string;
typedef enum hlt_session_stat {
  HLT_SESSION_STAT_STATE = 1,          /* HLT_SESSION_STATE_* */
  HLT_SESSION_STAT_QEMU_PID = 2,       /* QEMU sessions, once started (libvirt: 0) */
  HLT_SESSION_STAT_RUNNING_US = 3,     /* restore start to the guest running (QEMU's RESUME event); 0 before */
  HLT_SESSION_STAT_DONE_US = 4,        /* restore start to QEMU reporting the migration completed; 0 before */
  HLT_SESSION_STAT_PAGES_SENT = 5,     /* pages sent to QEMU (requested, pushed, preloaded; at the end also those
                                          placed directly into its memory) */
  HLT_SESSION_STAT_BYTES_READ = 6,     /* checkpoint bytes read */
  HLT_SESSION_STAT_FAULTS = 7,         /* guest faults that waited for a block to be read */
  HLT_SESSION_STAT_RESUMED = 8,        /* 1: this session took over an interrupted restore */
  HLT_SESSION_STAT_REQUESTS = 9,       /* page requests QEMU sent (lazy) */
  HLT_SESSION_STAT_RESUMABLE = 10      /* QEMU: 1: the restore failed and QEMU waits to be resumed (HLT_SESSION_RESUME);
                                          libvirt: 0 (a failed lazy restore's record tells) */
} hlt_session_stat;
enum {
  HLT_SESSION_STATE_CREATED = 0, HLT_SESSION_STATE_STARTING = 1, HLT_SESSION_STATE_RUNNING = 2,
  HLT_SESSION_STATE_DONE = 3, HLT_SESSION_STATE_FAILED = 4, HLT_SESSION_STATE_DETACHED = 5
};
typedef enum hlt_event_kind {
  HLT_EVENT_NOTICE = 1,   /* what the session decided, the lines hlt-restore qemu prints */
  HLT_EVENT_WARNING = 2,  /* a problem that does not stop it */
  HLT_EVENT_RUNNING = 3,  /* the guest runs (or, resuming, runs again) */
  HLT_EVENT_DONE = 5,     /* every page in */
  HLT_EVENT_FAILED = 6    /* the restore failed: the text is hlt_last_error's */
} hlt_event_kind;
HALITE_EXPORT int hlt_session_create(hlt_session_kind kind, const char* checkpoint, hlt_session** out);
/* Setters: before hlt_session_start (HLT_EINVAL after). */
HALITE_EXPORT int hlt_session_set_param(hlt_session* s, hlt_session_param param, int64_t value);
HALITE_EXPORT int hlt_session_set_string(hlt_session* s, hlt_session_string option, const char* value);
/* Launch mode: appends one argument of QEMU's command line (not -incoming). A first argument naming an executable
 * is an argument like any other: the binary is HLT_SESSION_QEMU_BINARY. */
HALITE_EXPORT int hlt_session_add_qemu_arg(hlt_session* s, const char* arg);
/* How the checkpoint is opened (block cache, keys); copied. Default: as hlt_reader_open. */
HALITE_EXPORT int hlt_session_set_open_options(hlt_session* s, const hlt_open_options* options);
/* Launches or reaches QEMU, opens and checks the checkpoint, and restores until the guest runs (lazy; eager: until
 * every page is in). The errors hlt-restore qemu prints, then the session is HLT_SESSION_STATE_FAILED. Once. */
HALITE_EXPORT int hlt_session_start(hlt_session* s);
/* Waits up to timeout_ms (-1: no limit) for the restore's end: 0 when every page is in and QEMU reports the
 * migration completed, HLT_EABORTED on timeout (call it again), else the restore's error. */
HALITE_EXPORT int hlt_session_wait(hlt_session* s, int64_t timeout_ms);
/* After the restore ended (hlt_session_wait returned other than HLT_EABORTED): the launched QEMU keeps running
 * when the session is destroyed, and when this process exits. */
HALITE_EXPORT int hlt_session_detach(hlt_session* s);
HALITE_EXPORT int hlt_session_get_stat(const hlt_session* s, hlt_session_stat stat, uint64_t* value);
/* The next event, oldest first (waits up to timeout_ms, -1 no limit; HLT_ENOTFOUND when none came). *text is valid
 * until the next call on this session. */
HALITE_EXPORT int hlt_session_next_event(hlt_session* s, int64_t timeout_ms, hlt_event_kind* kind, const char** text);
/* libvirt: the domain restored into, once libvirt started it (HLT_ENOTFOUND before; resuming: the domain named,
 * its UUID ""). Both strings are the session's, unchanged until hlt_session_destroy. */
HALITE_EXPORT int hlt_session_get_domain(const hlt_session* s, const char** name, const char** uuid);
/* NULL is ignored. A session still restoring kills the QEMU it launched and waits for the restore to end (an
 * attached QEMU's restore, and a libvirt domain's, is waited for); a launched QEMU not detached is killed. */
HALITE_EXPORT void hlt_session_destroy(hlt_session* s);

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
