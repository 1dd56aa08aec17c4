// Streaming reader for `xl save` images, bare libxl streams and bare libxc streams (x86 HVM, v2 and v3).
//
// Reads strictly forward from a SequentialSource (a pipe, FIFO, stdin or file), validating every rule of the specs
// and of Xen 4.17's restorer, and reports the stream to a StreamVisitor. Memory use is bounded by the largest
// record allowed (ReadOptions::max_record_length); pages are never accumulated.
//
// Errors (all messages name the input, the layer, the record number and type, and the byte offset):
//   kCorrupt      bytes that break the format: bad magic, lengths, padding, reserved bits, page types,
//                 truncation, records out of order, a record over the size caps.
//   kUnsupported  valid streams this reader does not take: big-endian, x86 PV, legacy (pre-v2) xl images,
//                 checkpointed (Remus/COLO) streams, unknown mandatory records (a newer Xen).
//   kIoError      from the SequentialSource.
//   anything a visitor callback returns.
#ifndef HALITE_XEN_XEN_STREAM_READER_H_
#define HALITE_XEN_XEN_STREAM_READER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "halite/status.h"
#include "halite/byte_streams.h"
#include "halite/xen/xen_stream_visitor.h"

namespace halite::xen {

enum class StreamFormat {
  kXl,     // xl wrapper + libxl stream + inline libxc stream: what `xl save` writes
  kLibxl,  // libxl stream (what `xl migrate` sends after its handshake)
  kLibxc,  // libxc stream alone (what xc_domain_save writes)
};
const char* StreamFormatName(StreamFormat format);  // "xl", "libxl", "libxc" (verify-stream-v2's -f names)
// The reverse. Errors: kInvalidArgument "expected xl, libxl or libxc, got \"X\"".
Result<StreamFormat> ParseStreamFormat(std::string_view name);

// Guesses the format from the first bytes (at least 8): the xl magic, the libxl ident or the libxc marker.
// Returns kCorrupt when none matches.
Result<StreamFormat> DetectStreamFormat(std::span<const uint8_t> head);

struct ReadOptions {
  std::string source_name = "stream";  // first word of every error message, e.g. the file name
  StreamFormat format = StreamFormat::kXl;
  // Record bodies longer than this are refused before anything is allocated (Xen's restorer: 128 MiB).
  uint32_t max_record_length = kRestoreRecordLengthMax;
  // PAGE_DATA count limit. Every Xen saver batches at most 1024 pfns; raise it only for streams of other origin.
  uint32_t max_pfns_per_record = kSaverBatchPfnsMax;
  uint64_t max_pfn = kX86MaxPfn;
  uint32_t max_xl_optional_data = 64u << 20;  // the xl wrapper's config; libxl configs are a few KiB
  // After the outermost END, insist that the input ends too. Turn off when the stream is followed by other
  // traffic on the same fd (the `xl migrate` handshake).
  bool require_end_of_input = true;
};

// Reads one complete stream of options.format from `source`. The visitor must outlive the call.
Status ReadStream(SequentialSource& source, StreamVisitor& visitor, const ReadOptions& options = {});

// The same over a buffer, for fuzzing and tests: the format is detected from the first bytes.
Status ParseStreamFromMemory(const uint8_t* data, size_t size, StreamVisitor& visitor);

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_STREAM_READER_H_
