// XenSaveImage: everything in a save stream except the page data, plus import and export.
//
// Import reads a stream, hands every PAGE_DATA batch to a PageBatchSink (the checkpoint writer) and keeps the rest:
// the xl config, every non-page record verbatim and in order (with its place relative to the page batches),
// and the page layout. EncodeXenState() turns that into one opaque blob for the checkpoint's device state;
// DecodeXenState() brings it back. Export writes the stream again, pulling page data from a PageBatchSource (the
// checkpoint reader): with the kept order and layout, an unchanged import/export reproduces the input bytes
// (streams that resend pages write each page once, its last copy). Memory holds only the non-page records and
// the layout; pages stream through the callbacks.
#ifndef HALITE_XEN_XEN_SAVE_IMAGE_H_
#define HALITE_XEN_XEN_SAVE_IMAGE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "halite/status.h"
#include "halite/byte_streams.h"
#include "halite/xen/xen_page_layout.h"
#include "halite/xen/xen_stream_reader.h"
#include "halite/xen/xen_stream_visitor.h"

namespace halite::xen {

// A non-page record kept verbatim.
struct KeptRecord {
  uint32_t type = 0;
  std::vector<uint8_t> body;
  // libxc records only: PAGE_DATA batches before this record (0 for static data, batch_count() at the end).
  uint32_t page_batches_before = 0;
  bool operator==(const KeptRecord&) const = default;
};

struct XenSaveImage {
  StreamFormat format = StreamFormat::kXl;  // the outermost layer the stream had; export writes the same

  // xl wrapper (format kXl only)
  uint32_t xl_mandatory_flags = kXlMandatoryJson | kXlMandatoryStreamV2;
  uint32_t xl_optional_flags = 0;
  bool xl_has_config = false;
  std::vector<uint8_t> config;              // libxl domain config JSON, with its trailing NUL as xl writes it
  std::vector<uint8_t> xl_optional_tail;    // optional data after the config (empty from xl 4.17)

  // libxl stream (formats kXl and kLibxl): every record in order, LIBXC_CONTEXT and END included
  uint32_t libxl_options = 0;
  std::vector<KeptRecord> libxl_records;

  // libxc stream: headers, then every non-PAGE_DATA record in order, STATIC_DATA_END and END included
  LibxcHeaders libxc;
  std::vector<KeptRecord> libxc_records;
  PageLayout pages;

  bool operator==(const XenSaveImage&) const = default;
};

// Receives page data during import. Called once per PAGE_DATA record, in stream order; the data pointers are
// valid only during the call. A pfn may come again in a later batch (live migration passes): the last one wins,
// and a later XTAB turns the pfn into a hole. The copies `xl save --debug` sends after a VERIFY record are
// not delivered, and the VERIFY record is not kept: they only repeat pages already sent.
class PageBatchSink {
 public:
  virtual ~PageBatchSink() = default;
  virtual Status OnPages(const PageBatch& batch) = 0;
};

// Supplies page data during export. `pfns` lists up to 1024 pfns whose type carries data, in stream order;
// fill out[i * 4096 .. (i + 1) * 4096) with the data of pfns[i]. Errors abort the export and are returned.
class PageBatchSource {
 public:
  virtual ~PageBatchSource() = default;
  virtual Status ReadPages(std::span<const uint64_t> pfns, uint8_t* out) = 0;
};

struct ImportStats {
  uint64_t batches = 0;
  uint64_t data_pages = 0;     // entries with data delivered (each resend counts)
  uint64_t xtab_entries = 0;
  uint64_t xalloc_entries = 0;
  uint64_t other_no_data_entries = 0;  // BROKEN
  uint64_t resent_entries = 0;  // entries naming a pfn an earlier batch already named
  uint64_t verify_copy_batches = 0;  // batches after a VERIFY record: debug copies, checked by Xen, not kept
};

// A StreamVisitor that fills a XenSaveImage and forwards pages. Use directly to combine with other visitors,
// or through ImportSaveStream. Both pointers are borrowed and must outlive the importer.
class XenImporter : public StreamVisitor {
 public:
  XenImporter(XenSaveImage* image, PageBatchSink* sink, StreamFormat format);
  Status OnXlHeader(const XlHeader& h) override;
  Status OnLibxlHeader(const LibxlHeader& h) override;
  Status OnLibxlRecord(const LibxlRecord& r) override;
  Status OnLibxcHeaders(const LibxcHeaders& h) override;
  Status OnLibxcRecord(const LibxcRecord& r) override;
  Status OnPageBatch(const PageBatch& b) override;
  Status OnStreamEnd() override;
  const ImportStats& stats() const { return stats_; }

 private:
  XenSaveImage* image_;
  PageBatchSink* sink_;
  PfnSet seen_;
  ImportStats stats_;
  bool in_verify_copies_ = false;
};

// Reads a whole stream from `source` (format from options.format), sending pages to `sink`.
// Errors: those of ReadStream, and any from the sink.
Result<XenSaveImage> ImportSaveStream(SequentialSource& source, PageBatchSink& sink, const ReadOptions& options,
                                      ImportStats* stats = nullptr);

// Writes `image` as a stream of image.format to `out` (and flushes it), reading page data from `pages`.
// Errors: kInvalidArgument when the image is inconsistent (no END, record positions beyond the layout, no
// LIBXC_CONTEXT), plus any from the source or sink.
Status ExportSaveStream(const XenSaveImage& image, PageBatchSource& pages, SequentialSink& out);

// Rearranges the records into the order Xen 4.17's saver writes an HVM stream, for images whose order was not
// kept (built from a checkpoint by other means, or v2 streams to upgrade): libxc v3 with X86_CPUID_POLICY,
// X86_MSR_POLICY, STATIC_DATA_END, page data, X86_TSC_INFO, HVM_CONTEXT, HVM_PARAMS, optional records, END;
// libxl LIBXC_CONTEXT, EMULATOR_XENSTORE_DATA, EMULATOR_CONTEXT, optional records, END. VERIFY is dropped
// (it announces debug copies that export never writes). Adds STATIC_DATA_END, LIBXC_CONTEXT and END if missing.
void OrderLikeXen417(XenSaveImage* image);

// The image minus page data as one self-describing blob (format in xen_device_state.cc), and back.
// DecodeXenState checks every length and count; errors: kCorrupt (naming the field and offset),
// kUnsupported for a newer blob version.
std::vector<uint8_t> EncodeXenState(const XenSaveImage& image);
Result<XenSaveImage> DecodeXenState(std::span<const uint8_t> blob);

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_SAVE_IMAGE_H_
