// CheckpointReader: opens a checkpoint, validates it, finds pages in O(1) and reads verified blocks.
//
// Open() reads the footer, the header and the whole index, and checks every rule of format-spec sections 3-6
// (checksums, limits, references, layout) before returning; payloads are verified as they are read. After
// Open() all accessors are const and every method is thread-safe: the restore engine's fault handlers and its
// loader call ReadBlock concurrently.
//
// Memory: the index as decoded (4 bytes a page for the page map) plus 8 bytes per stored page reference for
// the block-member table; nothing proportional to the stored data.
#ifndef HALITE_CHECKPOINT_READER_H_
#define HALITE_CHECKPOINT_READER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halite/export.h"
#include "halite/checkpoint_types.h"
#include "halite/status.h"
#include "halite/storage.h"

namespace halite {

struct HALITE_EXPORT ReaderOptions {
  FileOpenOptions file;
  // When set, the checkpoint must be authenticated with this key (format-spec 5.8): Open() checks the header and
  // index MAC, ReadBlock/ReadBlob check each payload's MAC before using a byte of it, and every failure (a MAC
  // mismatch, a checkpoint without MAC, or any damage that prevents authentication) is kAuthFailed.
  std::optional<std::array<uint8_t, 32>> mac_key;
};

// A page of a block: which global page it is, and which slot of the block holds its content.
struct HALITE_EXPORT BlockMember {
  uint32_t page = 0;  // global page number
  uint32_t slot = 0;  // slot within the block
};

struct HALITE_EXPORT VerifyProgress {
  uint64_t blocks_done = 0, blocks_total = 0;
};

class HALITE_EXPORT CheckpointReader {
 public:
  // Errors: kIoError (cannot read), kCorrupt (any rule broken), kUnsupported (newer format version).
  static Result<std::unique_ptr<CheckpointReader>> Open(const std::string& path, ReaderOptions options = {});
  static Result<std::unique_ptr<CheckpointReader>> Open(std::unique_ptr<RandomAccessFile> file,
                                                        ReaderOptions options = {});
  ~CheckpointReader();

  const std::string& name() const;
  uint64_t file_size() const;
  const FileId& file_id() const;
  uint16_t format_major() const;
  uint16_t format_minor() const;
  uint64_t index_offset() const;
  uint64_t index_length() const;
  const Metadata& metadata() const;

  const std::vector<Region>& regions() const;
  // Index of the region called `name`; kNotFound otherwise.
  Result<uint32_t> FindRegion(std::string_view name) const;
  uint64_t total_pages() const;
  // Global page number of (region, page). Precondition: both in range.
  uint64_t GlobalPage(PageRef ref) const;
  PageRef PageOf(uint64_t global_page) const;

  const std::vector<BlockInfo>& blocks() const;
  const std::vector<BlobInfo>& blobs() const;
  const std::vector<uint32_t>& restore_order() const;
  uint32_t working_set_blocks() const;
  size_t dictionary_size() const;
  bool authenticated() const;  // the file carries a MAC section

  // O(1). Precondition: global_page < total_pages().
  PageLocation Locate(uint64_t global_page) const;
  // Every page whose content lives in `block`, duplicates included, in slot order.
  std::span<const BlockMember> BlockMembers(uint32_t block) const;

  // Reads block `block`, verifies its checksum (and MAC, with a key) and decompresses it into `out`, which must
  // hold exactly blocks()[block].raw_length() bytes. A payload that fails verification is read from storage once
  // more before it is declared corrupt (a bit flipped in transit is not damage on storage); blocks_reread()
  // counts the second reads that verified. Errors: kIoError (retryable when transient), kCorrupt (kAuthFailed
  // for a MAC) naming the block, its offset and what failed, after both reads failed. On error `out` may hold
  // garbage: never install it.
  Status ReadBlock(uint32_t block, std::span<uint8_t> out) const;
  // The same; `*reread` (when not null) is set to true when the first read failed verification and the second
  // verified, and left alone otherwise.
  Status ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread) const;
  // The same for several blocks, with the payload reads submitted as one batch (io_uring when available).
  // Returns the first error; `statuses` (same length as `blocks`) receives each block's own result. A payload
  // that fails verification is re-read on its own, as in ReadBlock.
  Status ReadBlocks(std::span<const uint32_t> blocks, std::span<const std::span<uint8_t>> outs,
                    std::span<Status> statuses) const;
  // Block payloads that failed verification when first read and verified when read again, by every read
  // method of this reader so far. Thread-safe.
  uint64_t blocks_reread() const;
  // Reads one page (any kind: absent and zero pages read as zeros). out.size() must be 4096.
  Status ReadPage(uint64_t global_page, std::span<uint8_t> out) const;

  Result<std::vector<uint8_t>> ReadBlob(uint32_t index) const;
  Result<std::vector<uint8_t>> ReadBlob(std::string_view name) const;

  // Reads and checks every block and blob (hlt-restore verify).
  Status VerifyAll(const std::function<void(const VerifyProgress&)>& progress = {}) const;

  class Impl;

 private:
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite

#endif  // HALITE_CHECKPOINT_READER_H_
