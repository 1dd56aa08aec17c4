// libFuzzer target for the Xen save-stream parser (wired into the fuzz build by the top level).
//
// Any input: detect the layer, import it (pages touched so sanitizers see every byte handed out). An input the
// importer accepts must survive the state blob and export to a stream the reader accepts again; anything else
// is a bug. The same bytes also go to the state-blob decoder, the other parser fed from outside.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "halite/xen/xen_hvm_context.h"
#include "halite/xen/xen_save_image.h"
#include "halite/xen/xen_stream_reader.h"

namespace {

using namespace halite;
using namespace halite::xen;

class ZeroPages : public PageBatchSink, public PageBatchSource {
 public:
  Status OnPages(const PageBatch& batch) override {
    for (const PageEntry& e : batch.entries) {
      if (e.data) sum_ += e.data[0] + e.data[kPageSize - 1];
    }
    return Status::Ok();
  }
  Status ReadPages(std::span<const uint64_t> pfns, uint8_t* out) override {
    for (size_t i = 0; i < pfns.size() * kPageSize; ++i) out[i] = static_cast<uint8_t>(i);
    return Status::Ok();
  }
  unsigned sum_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  (void)DecodeXenState(bytes);
  (void)ParseHvmContext(bytes);

  ReadOptions options;
  options.source_name = "fuzz";
  auto format = DetectStreamFormat(bytes);
  options.format = format ? *format : StreamFormat::kXl;
  MemorySource source(bytes);
  ZeroPages pages;
  auto image = ImportSaveStream(source, pages, options);
  if (!image) return 0;

  auto decoded = DecodeXenState(EncodeXenState(*image));
  if (!decoded || !(*decoded == *image)) std::abort();
  VectorSink out;
  if (!ExportSaveStream(*image, pages, out).ok()) std::abort();
  StreamVisitor visitor;
  if (!ParseStreamFromMemory(out.data().data(), out.data().size(), visitor).ok()) std::abort();
  return 0;
}
