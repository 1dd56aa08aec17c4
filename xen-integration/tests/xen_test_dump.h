// Test helpers shared by the tests and xen-stream-tool: the event dump that test-vectors/*.expect hold, a page
// store standing in for the checkpoint, and the synthetic image generator.
#ifndef HALITE_XEN_TESTS_XEN_TEST_DUMP_H_
#define HALITE_XEN_TESTS_XEN_TEST_DUMP_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "halite/xen/xen_save_image.h"
#include "halite/xen/xen_stream_visitor.h"

namespace halite::xen::testing {

std::string Fnv1a64Hex(const uint8_t* data, size_t n);

// Renders every event as one line, in the format of test-vectors/README.md.
class DumpVisitor : public StreamVisitor {
 public:
  Status OnXlHeader(const XlHeader& h) override;
  Status OnLibxlHeader(const LibxlHeader& h) override;
  Status OnLibxlRecord(const LibxlRecord& r) override;
  Status OnLibxcHeaders(const LibxcHeaders& h) override;
  Status OnStaticDataEndInferred(uint64_t offset) override;
  Status OnLibxcRecord(const LibxcRecord& r) override;
  Status OnPageBatch(const PageBatch& b) override;
  Status OnStreamEnd() override;
  std::string text() const;

 private:
  std::vector<std::string> lines_;
};

// Final page state, last copy wins: pfn -> (type, fnv of data or "-").
using PageState = std::map<uint64_t, std::pair<PageType, std::string>>;

// Keeps pages in memory (small vectors) and serves them back: the checkpoint's stand-in.
class MemoryPageStore : public PageBatchSink, public PageBatchSource {
 public:
  Status OnPages(const PageBatch& batch) override;
  Status ReadPages(std::span<const uint64_t> pfns, uint8_t* out) override;
  PageState State() const;

 private:
  std::map<uint64_t, std::pair<PageType, std::vector<uint8_t>>> pages_;
};

// Synthetic HVM guest: pfn -> deterministic type and content (zero pages, XTAB holes, XALLOC pages).
PageType SynthType(uint64_t pfn);
void SynthPage(uint64_t pfn, uint8_t* out);
// A whole image model for `pages` pfns in Xen 4.17's order; pages come from SynthPageSource.
XenSaveImage MakeSynthImage(uint64_t pages);
class SynthPageSource : public PageBatchSource {
 public:
  Status ReadPages(std::span<const uint64_t> pfns, uint8_t* out) override;
};

}  // namespace halite::xen::testing

#endif  // HALITE_XEN_TESTS_XEN_TEST_DUMP_H_
