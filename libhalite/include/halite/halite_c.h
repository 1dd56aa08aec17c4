/* libhalite C API: for VMMs written in C (QEMU, Xen's tools).
 *
 * Opaque handles; every call returns 0 or a negative error code (HLT_E*); hlt_strerror() turns a code into text
 * and hlt_last_error() gives the detailed message of the calling thread's last failure (file, offset, what was
 * expected). A reader handle may be used from several threads at once; a writer handle from one thread. */
#ifndef HALITE_HALITE_C_H_
#define HALITE_HALITE_C_H_

#include <stddef.h>
#include <stdint.h>

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
const char* hlt_strerror(int code);
/* The detailed message of this thread's last failed call ("" if none). Valid until the next call. */
const char* hlt_last_error(void);

/* --- reading --- */
int hlt_reader_open(const char* path, hlt_reader** out);
void hlt_reader_close(hlt_reader* r);
uint32_t hlt_reader_region_count(const hlt_reader* r);
/* Region i's name (owned by the reader), guest-physical base, size in bytes. */
int hlt_reader_region(const hlt_reader* r, uint32_t i, const char** name, uint64_t* base, uint64_t* size);
uint32_t hlt_reader_block_count(const hlt_reader* r);
/* Bytes a block decompresses to (page_count * 4096). */
uint64_t hlt_reader_block_size(const hlt_reader* r, uint32_t block);
/* Where page `page` of region `region` lives: *kind is HLT_PAGE_*, *block and *slot valid for STORED. */
int hlt_reader_lookup(const hlt_reader* r, uint32_t region, uint64_t page, int* kind, uint32_t* block,
                      uint32_t* slot);
/* Reads, verifies and decompresses a block into buf (buf_len must equal hlt_reader_block_size). */
int hlt_reader_read_block(const hlt_reader* r, uint32_t block, void* buf, size_t buf_len);
/* Reads one page (zero and absent pages read as zeros) into buf[4096]. */
int hlt_reader_read_page(const hlt_reader* r, uint32_t region, uint64_t page, void* buf);
/* Reads the named blob into a malloc'ed buffer the caller frees. */
int hlt_reader_read_blob(const hlt_reader* r, const char* name, void** data, size_t* len);

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

int hlt_writer_create(const char* path, const hlt_writer_options* options, hlt_writer** out);
/* Adds a region; *region_out receives its index. */
int hlt_writer_add_region(hlt_writer* w, const char* name, uint64_t base, uint64_t size, uint32_t* region_out);
int hlt_writer_put_page(hlt_writer* w, uint32_t region, uint64_t page, const void* data);
int hlt_writer_put_zero_pages(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count);
/* Save-time access hint: pages in the order the guest touched them. */
int hlt_writer_add_accessed(hlt_writer* w, uint32_t region, uint64_t first, uint64_t count);
int hlt_writer_add_blob(hlt_writer* w, const char* name, const void* data, size_t len);
/* Writes everything and puts the file in place. The writer is freed whatever the result. */
int hlt_writer_finish(hlt_writer* w);
/* Discards everything (no file is left). */
void hlt_writer_abort(hlt_writer* w);

#ifdef __cplusplus
}
#endif

#endif /* HALITE_HALITE_C_H_ */
