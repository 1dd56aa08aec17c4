// Low-level writer for the three layers of a save image, appending to a SequentialSink.
//
// Each call frames one header or record exactly as Xen does (little-endian records, zero padding to 8 bytes,
// big-endian libxl/libxc headers) and refuses arguments that would produce a stream Xen's restorer rejects
// (kInvalidArgument). The caller chooses the order; ExportSaveStream (xen_save_image.h) uses the order
// Xen 4.17's saver writes. Not thread-safe. The sink is borrowed and must outlive the writer.
#ifndef HALITE_XEN_XEN_STREAM_WRITER_H_
#define HALITE_XEN_XEN_STREAM_WRITER_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "halite/status.h"
#include "halite/byte_streams.h"
#include "halite/xen/xen_stream_visitor.h"

namespace halite::xen {

class StreamWriter {
 public:
  explicit StreamWriter(SequentialSink& sink) : sink_(sink) {}

  // The xl wrapper. With has_config, optional data is a u32 config length, the config, then optional_tail.
  Status WriteXlHeader(const XlHeader& header);
  Status WriteLibxlHeader(const LibxlHeader& header);
  Status WriteLibxlRecord(uint32_t type, std::span<const uint8_t> body);
  // Image and domain header; `offset` is ignored.
  Status WriteLibxcHeaders(const LibxcHeaders& headers);
  // Any libxc record but PAGE_DATA (use WritePageBatch).
  Status WriteLibxcRecord(uint32_t type, std::span<const uint8_t> body);
  // One PAGE_DATA record: 1..1024 entries, distinct pfns, data present exactly for types that carry it.
  Status WritePageBatch(std::span<const PageEntry> entries);

  uint64_t bytes_written() const { return written_; }

 private:
  Status Put(const void* p, size_t n);
  Status PutRecordHeader(uint32_t type, uint64_t length);
  Status PutPadding(uint64_t length);

  SequentialSink& sink_;
  uint64_t written_ = 0;
  std::vector<uint8_t> scratch_;
};

// Record bodies with a fixed layout, for callers that build streams (tests, synthetic images).
std::vector<uint8_t> MakeTscInfoBody(uint32_t mode, uint32_t khz, uint64_t nsec, uint32_t incarnation);
std::vector<uint8_t> MakeHvmParamsBody(std::span<const std::pair<uint64_t, uint64_t>> params);
std::vector<uint8_t> MakeEmulatorBody(uint32_t emulator_id, uint32_t index, std::span<const uint8_t> payload);

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_STREAM_WRITER_H_
