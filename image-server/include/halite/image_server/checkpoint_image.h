// One region of a checkpoint as a flat image file: byte offset O of the image is byte O of the region's memory.
//
// This is what the host image server (fuse_image_server.h) hands the kernel, so that QEMUs mapping the image
// privately (memory-backend-file, share=off) share one copy in the page cache. A read of any byte decodes its
// page's whole locality block (the pages the guest is likely to touch together) once; the caller gets the block's
// other pages back, by image offset, to push into the page cache at once, so the guest's next touches of that
// block are minor faults, for every clone on the host.
//
// Zero and absent pages are never stored: they read as zeros without touching the checkpoint. A block that fails
// verification is never returned: the read fails with kCorrupt naming the block, every time it is asked for.
//
// Thread-safe: many reads at once; concurrent reads of one block decode it once (the others wait for it).
#ifndef HALITE_IMAGE_SERVER_CHECKPOINT_IMAGE_H_
#define HALITE_IMAGE_SERVER_CHECKPOINT_IMAGE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/status.h"

namespace halite::image_server {

// A decoded block's pages of this image, as runs of consecutive image offsets (what one page-cache store takes).
struct DecodedBlock {
  uint32_t block = 0;
  std::shared_ptr<const std::vector<uint8_t>> data;  // the block's raw pages, slot order
  struct Run {
    uint64_t image_offset = 0;  // where the run starts in the image
    std::vector<uint32_t> slots;  // the block slot holding each of its pages
  };
  std::vector<Run> runs;
  uint64_t pages() const;
};

struct CheckpointImageStats {
  uint64_t reads = 0;            // Read calls
  uint64_t bytes_read = 0;       // bytes they returned
  uint64_t blocks_decoded = 0;   // block reads + decompressions (a block the page cache dropped decodes again)
  uint64_t distinct_blocks = 0;  // blocks decoded at least once
  uint64_t checkpoint_bytes = 0; // bytes of the checkpoint read to decode them (stored, compressed lengths)
  uint64_t zero_pages_read = 0;  // pages answered with zeros without the checkpoint
  uint64_t read_errors = 0;      // reads that failed (corrupt or unreadable block)
};

class CheckpointImage {
 public:
  // The image of `region` (a region name such as "ram" or "pc.ram"). The reader is shared: it must stay open as
  // long as the image. Errors: kNotFound when the checkpoint has no such region.
  static Result<std::unique_ptr<CheckpointImage>> Open(std::shared_ptr<const CheckpointReader> reader,
                                                       const std::string& region);
  ~CheckpointImage();

  uint64_t size() const;
  const std::string& region_name() const;
  const CheckpointReader& reader() const;

  // Copies image bytes [offset, offset + out.size()) into out (a read past the end is cut short: returns the
  // count). Every block this needed that was not decoded before is appended to `decoded`, when given, with all
  // its pages of this image: the caller may store them in the page cache.
  Result<size_t> Read(uint64_t offset, std::span<uint8_t> out, std::vector<DecodedBlock>* decoded = nullptr);

  // Decodes block `block` (for a prefetcher going through the restore order): as a Read of one of its pages.
  // A block with no page in this image gives an empty DecodedBlock.
  Result<DecodedBlock> Decode(uint32_t block);

  // True once `block` has been decoded (by a read or Decode).
  bool WasDecoded(uint32_t block) const;

  // Blocks holding pages of this image, in the checkpoint's restore order (what a prefetcher goes through).
  std::vector<uint32_t> RestoreOrder() const;

  CheckpointImageStats Stats() const;

 private:
  class Impl;
  explicit CheckpointImage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite::image_server

#endif  // HALITE_IMAGE_SERVER_CHECKPOINT_IMAGE_H_
