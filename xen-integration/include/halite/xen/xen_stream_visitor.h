// Events the stream reader emits, in stream order, and the visitor interface that receives them.
//
// Every span and pointer in an event borrows the reader's buffers and is valid only during the callback:
// copy what must outlive it. A callback that returns a non-ok Status stops the read and that Status is
// returned from the Read call unchanged.
#ifndef HALITE_XEN_XEN_STREAM_VISITOR_H_
#define HALITE_XEN_XEN_STREAM_VISITOR_H_

#include <cstdint>
#include <span>

#include "halite/status.h"
#include "halite/xen/xen_format.h"

namespace halite::xen {

// The xl file wrapper (absent when the input is a bare libxl or libxc stream).
struct XlHeader {
  uint32_t mandatory_flags = 0;
  uint32_t optional_flags = 0;
  bool has_config = false;              // the optional data held a config length word
  std::span<const uint8_t> config;      // libxl domain config (JSON with its NUL when the JSON flag is set)
  std::span<const uint8_t> optional_tail;  // optional data after the config, kept verbatim (none from xl 4.17)
};

struct LibxlHeader {
  uint32_t options = 0;  // only bit 1 (legacy-converted) can be set in an accepted stream
};

// One libxl record, including LIBXC_CONTEXT (whose libxc stream events follow it) and END.
struct LibxlRecord {
  uint32_t index = 0;   // 0-based position among libxl records
  uint64_t offset = 0;  // byte offset of the record header in the input
  uint32_t type = 0;
  std::span<const uint8_t> body;  // without padding
};

struct LibxcHeaders {
  uint64_t offset = 0;  // of the image header
  uint32_t version = 0;  // 2 or 3
  uint16_t options = 0;  // always 0 in an accepted stream (little-endian)
  uint32_t domain_type = 0;  // kDomainTypeX86Hvm
  uint16_t page_shift = 0;
  uint32_t xen_major = 0;  // 0 for streams converted from the legacy format
  uint32_t xen_minor = 0;
  bool operator==(const LibxcHeaders&) const = default;
};

// One libxc record other than PAGE_DATA (those arrive as PageBatch), including STATIC_DATA_END and END.
struct LibxcRecord {
  uint32_t index = 0;       // 0-based position among libxc records (PAGE_DATA records count too)
  uint64_t offset = 0;
  uint32_t page_batches_before = 0;  // PAGE_DATA records seen before this one: its place relative to memory
  uint32_t type = 0;
  std::span<const uint8_t> body;
};

struct PageEntry {
  uint64_t pfn = 0;
  PageType type = PageType::kNormal;
  const uint8_t* data = nullptr;  // kPageSize bytes, or null for types without data (XTAB, XALLOC, BROKEN)
};

// One PAGE_DATA record. Live streams send a pfn again in later passes: the last copy wins, including a later
// XTAB that turns the pfn into a hole. Within one batch a pfn appears at most once (the reader checks).
struct PageBatch {
  uint32_t record_index = 0;  // libxc record index
  uint32_t batch_index = 0;   // 0-based among PAGE_DATA records
  uint64_t offset = 0;
  std::span<const PageEntry> entries;
};

class StreamVisitor {
 public:
  virtual ~StreamVisitor() = default;
  virtual Status OnXlHeader(const XlHeader&) { return Status::Ok(); }
  virtual Status OnLibxlHeader(const LibxlHeader&) { return Status::Ok(); }
  virtual Status OnLibxlRecord(const LibxlRecord&) { return Status::Ok(); }
  virtual Status OnLibxcHeaders(const LibxcHeaders&) { return Status::Ok(); }
  // A v2 stream has no STATIC_DATA_END; per the spec the receiver behaves as if it had been sent just before
  // the first PAGE_DATA record. Called there, before that record's OnPageBatch.
  virtual Status OnStaticDataEndInferred(uint64_t /*offset*/) { return Status::Ok(); }
  virtual Status OnLibxcRecord(const LibxcRecord&) { return Status::Ok(); }
  virtual Status OnPageBatch(const PageBatch&) { return Status::Ok(); }
  // After the outermost layer's END (and the end-of-input check, when requested).
  virtual Status OnStreamEnd() { return Status::Ok(); }
};

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_STREAM_VISITOR_H_
