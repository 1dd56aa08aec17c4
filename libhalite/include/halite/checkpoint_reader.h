// CheckpointReader: opens a checkpoint, validates it, finds pages in O(1) and reads verified blocks.
//
// Open() reads the footer, the header and the whole index, and checks every rule of format-spec sections 3-6
// (checksums, limits, references, layout) before returning; payloads are verified as they are read. After
// Open() all accessors are const and every method is thread-safe: the restore engine's fault handlers and its
// loader call ReadBlock concurrently.
//
// Incremental checkpoints (format-spec section 12): when the file has a PARENT section, Open() also opens its
// chain (the parent, found through the path hint or ReaderOptions::parent_dirs, its own parent, ...), checks each
// parent's file_id and index fingerprint, the chain depth and that no file appears twice, all before returning;
// a failure names both files. The reader then presents the chain's view as if it were one file: blocks() lists
// its block groups (format-spec 12), this file's blocks first, then each block of the parent's view that still
// holds a page of this checkpoint (chain_level > 0, offsets inside that parent's file, HOT cleared), extended by
// this file's blocks coded against it (BASED, since 1.4: page_count and stored_length are then the group's, its
// raw content the parent's block's followed by theirs); Locate, BlockMembers, ReadBlock(s), ReadPage and the
// restore order all speak of that view, so every restore path reads a chain as it reads a full checkpoint, one read
// per group, each block of the chain read once. Blobs and metadata are this file's own.
//
// Memory: the index as decoded (4 bytes a page for the page map, 8 more with PAGE_HASHES) plus 8 bytes per
// stored page reference for the block-member table, for each file of the chain; nothing proportional to the
// stored data.
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
#include "halite/block_cache.h"
#include "halite/checkpoint_types.h"
#include "halite/encryption.h"
#include "halite/status.h"
#include "halite/storage.h"

namespace halite {

struct HALITE_EXPORT ReaderOptions {
  FileOpenOptions file;
  // When set, the checkpoint must be authenticated with this key (format-spec 5.8): Open() checks the header and
  // index MAC, ReadBlock/ReadBlob check each payload's MAC before using a byte of it, and every failure (a MAC
  // mismatch, a checkpoint without MAC, or any damage that prevents authentication) is kAuthFailed.
  std::optional<std::array<uint8_t, 32>> mac_key;
  // Incremental checkpoints (format-spec 12): a parent is looked for at its path hint (relative to the directory
  // of the file that names it), then as the hint's last component in each of these directories, in order. The
  // first candidate whose file_id and index fingerprint match is used. `mac_key`, when set, applies to every file.
  std::vector<std::string> parent_dirs;
  // The deepest chain accepted (parent links below the file opened), 0..16; the format's limit is 16.
  uint32_t max_chain_depth = format::kMaxChainDepth;
  // How a parent is opened, given its candidate path; default OpenLocalFile(path, file). Tests and fuzzers serve
  // parents from memory. Errors it returns are reported (the first candidate's) when no candidate fits.
  std::function<Result<std::unique_ptr<RandomAccessFile>>(const std::string& path)> open_parent;
  // A host block cache (halite/block_cache.h), shared with other readers and processes. Used for the files of
  // the chain whose storage is remote (RandomAccessFile::hints().remote: s3://, rados://): each block payload is
  // looked for there before storage is asked, and kept there once read and verified. Local files never use it
  // (the page cache does that job). Null: no cache. VerifyAll always reads storage.
  std::shared_ptr<BlockCache> block_cache;
  // Encrypted checkpoints (format-spec 13): the keys, looked up by the key id each file's header names (the files
  // of a chain may use different keys; parents too are looked up here). A file whose key the keyring cannot give
  // is refused by Open() with kAuthFailed naming the file and the key id, before anything else is read; a wrong
  // key cannot be given (the id is the key's own). Keys are used in memory only: blocks, blobs and sealed index
  // sections are decrypted into the caller's buffers, and what goes to the block cache is the stored ciphertext.
  std::shared_ptr<Keyring> keyring;
  // Open an encrypted file whose key the keyring cannot give anyway, with what is readable without it (13.7:
  // hlt-restore info and verify): sealed() is true, total_pages() is 0, blocks(), blobs() and restore_order() are
  // the file's own, no parent is opened, every content read (ReadBlock(s), FetchBlocks, DecodeBlock, ReadPage,
  // ReadBlob) fails with kAuthFailed naming the key id, and VerifyAll checks the structure and every payload's
  // checksum. Never applies to parents: a chain is opened with every key or not at all.
  bool open_without_key = false;
};

// Where the block payloads of a reader came from, over every file of its chain (CheckpointReader::read_stats()).
// Counters only grow.
struct HALITE_EXPORT ReaderStats {
  uint64_t storage_requests = 0;  // requests the files' backends sent to storage (ReadCounters), since open
  uint64_t storage_bytes = 0;     // ... and the bytes they transferred
  uint64_t blocks_fetched = 0;    // block payloads read from storage (re-reads after a failed check included)
  uint64_t block_bytes_fetched = 0;
  uint64_t cache_hits = 0;        // block payloads served by the block cache and verified
  uint64_t cache_misses = 0;      // blocks looked for in the cache and not found there
  uint64_t cache_dropped = 0;     // cached payloads that failed verification: deleted, read from storage instead
  uint64_t cache_inserts = 0;     // payloads read from storage and put in the cache (or found there already)
};

// A block payload fetched but not yet verified or decoded (CheckpointReader::FetchBlocks, then DecodeBlock).
struct HALITE_EXPORT FetchedBlock {
  uint32_t block = 0;            // in the chain's view numbering
  std::vector<uint8_t> payload;  // the stored bytes, unverified
  Status status;                 // the fetch's own result
  bool from_cache = false;       // the payload came from the block cache
};

// One file of a chain as the opened checkpoint uses it (CheckpointReader::chain()).
struct HALITE_EXPORT ChainLevel {
  std::string name;            // the file, as opened
  FileId file_id{};
  uint16_t format_minor = 0;
  uint64_t file_size = 0;
  uint64_t blocks = 0;         // blocks stored in this file
  uint64_t block_bytes = 0;    // their payload bytes
  uint64_t live_blocks = 0;    // of those, blocks a restore of the opened checkpoint reads (they hold a page of it,
                               // or are in a block group with one that does)
  uint64_t pages = 0;          // pages of the opened checkpoint whose bytes come from this file
  // How this file's blocks are coded (format-spec 5.4): of independent frames, with the dictionary, against the
  // parent (BASED); and its dictionary's size.
  uint64_t framed_blocks = 0;
  uint64_t dictionary_blocks = 0;
  uint64_t based_blocks = 0;
  uint64_t dictionary_bytes = 0;
  uint32_t chain_depth = 0;    // parent links below this file (0: a full checkpoint)
  std::string path_hint;       // how this file names its parent; empty for a full checkpoint
};

// A page of a block: which global page it is, and which slot of the block holds its content.
struct HALITE_EXPORT BlockMember {
  uint32_t page = 0;  // global page number
  uint32_t slot = 0;  // slot within the block
};

// One block of a block group of the view (format-spec 12, CheckpointReader::GroupParts): which file of the chain
// holds it and which slots of the group it fills.
struct HALITE_EXPORT GroupPart {
  uint32_t chain_level = 0;  // chain()[chain_level] holds it
  uint32_t first_slot = 0;   // its first slot within the group
  uint32_t page_count = 0;   // its slots
  bool based = false;        // coded against the group's slots before it (BASED, 5.4)
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

  // Every block (group) of the chain's view (see the top of this file): this file's first, then the parent's.
  const std::vector<BlockInfo>& blocks() const;
  const std::vector<BlobInfo>& blobs() const;
  const std::vector<uint32_t>& restore_order() const;
  uint32_t working_set_blocks() const;
  size_t dictionary_size() const;
  bool authenticated() const;  // the file carries a MAC section
  // Format-spec 13: the file is encrypted; with which key (its id) and cipher. sealed(): opened without its key
  // (ReaderOptions::open_without_key), so nothing of its content can be read.
  bool encrypted() const;
  const KeyId& key_id() const;  // all zero when not encrypted
  Cipher cipher() const;        // kAuto when not encrypted
  bool sealed() const;

  // Chains (format-spec 12). chain()[0] is this file, chain()[1] its parent, and so on; one entry for a full
  // checkpoint. parent() is null for a full checkpoint; it lives as long as this reader.
  const std::vector<ChainLevel>& chain() const;
  const CheckpointReader* parent() const;
  uint32_t chain_depth() const;
  // Section 12: what a child of this file records in its PARENT section to name exactly this file.
  const std::array<uint8_t, 16>& index_fingerprint() const;
  // 5.11: the content hash of page `global_page` of this checkpoint's view (low 64 bits of XXH3_128 of its 4096
  // bytes; zero and absent pages hash as zeros), from the PAGE_HASHES section of the file that stores it; nullopt
  // when that file has none. A hint for writers of children: never proof that two pages are equal.
  // Precondition: global_page < total_pages().
  std::optional<uint64_t> PageHash(uint64_t global_page) const;
  bool has_page_hashes() const;  // this file has a PAGE_HASHES section
  // 5.12: how the writer chose this file's coding, when it recorded it (the CODING section); informative.
  const std::optional<CodingRecord>& coding() const;

  // O(1). Precondition: global_page < total_pages().
  PageLocation Locate(uint64_t global_page) const;
  // Every page whose content lives in `block`, duplicates included, in slot order.
  std::span<const BlockMember> BlockMembers(uint32_t block) const;
  // The blocks `block` (a block group of the view) is read from, in content order: one for every block of a full
  // checkpoint; a parent's block and the BASED blocks on it in a child's view. Precondition: block < blocks().size().
  std::vector<GroupPart> GroupParts(uint32_t block) const;

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
  // Called while a block is decoded with a range [begin, end) of `out` whose bytes now hold their final content;
  // the ranges never overlap and together cover `out`. So a fault can install its page before the rest of the
  // block is decoded. A non-ok return stops the read and is returned as it is. Runs on the calling thread.
  using BlockProgress = std::function<Status(size_t begin, size_t end)>;
  // The same, decoding the block a zstd block at a time (format-spec 5.4: writers cut frames every 8 pages) and
  // calling `progress` after each. A block of independent frames (FRAMED) is decoded from the frame holding byte
  // `first` of `out`, then the other frames in order; any other block in order from its start. Bytes are
  // reported only after the payload's checksum (and MAC) verified, so a damaged payload never reports any; a
  // payload that verifies but fails to decode later (only a faulty or hostile writer makes one) has already
  // reported the bytes before the failure, and the read then fails with kCorrupt as ReadBlock does.
  Status ReadBlock(uint32_t block, std::span<uint8_t> out, bool* reread, const BlockProgress& progress,
                   size_t first = 0) const;
  // The same for several blocks, with the payload reads submitted as one batch (io_uring when available).
  // Returns the first error; `statuses` (same length as `blocks`) receives each block's own result. A payload
  // that fails verification is re-read on its own, as in ReadBlock.
  Status ReadBlocks(std::span<const uint32_t> blocks, std::span<const std::span<uint8_t>> outs,
                    std::span<Status> statuses) const;
  // Reading in two steps, for a caller that streams many blocks (the restore engine's loader): FetchBlocks gets
  // the stored payloads of `blocks` without checking them (those in the block cache from there, the others in one
  // RandomAccessFile::ReadBatch per file of the chain, which an object store sends as a few joined requests);
  // DecodeBlock then checks and decodes one of them, when the caller wants it. `*out` gets one entry per block,
  // in order, each with its own status; returns the first error. Errors: kInvalidArgument (no such block)
  // before anything is read.
  Status FetchBlocks(std::span<const uint32_t> blocks, std::vector<FetchedBlock>* out) const;
  // Verifies `fetched` and decodes it into `out` (exactly raw_length() bytes), as ReadBlock does with a payload it
  // read itself: one that fails verification is read from storage once more (*reread, blocks_reread() as in
  // ReadBlock) - a cached one is dropped from the cache and read from storage as a first read; one that came
  // from storage goes into the block cache once verified. `progress` as in ReadBlock. Returns fetched.status when
  // the fetch had failed. Errors as ReadBlock. Decodes a FetchedBlock once: an encrypted file's payload is
  // decrypted in place, so fetched.payload no longer holds the stored bytes afterwards.
  Status DecodeBlock(FetchedBlock& fetched, std::span<uint8_t> out, bool* reread,
                     const BlockProgress& progress = {}) const;
  // Block payloads that failed verification when first read and verified when read again, by every read
  // method of this reader so far. Thread-safe.
  uint64_t blocks_reread() const;
  // How the chain's files are best read: the largest batch any of them suggests; remote when any file is.
  ReadHints read_hints() const;
  // Thread-safe.
  ReaderStats read_stats() const;
  // Reads one page (any kind: absent and zero pages read as zeros). out.size() must be 4096.
  Status ReadPage(uint64_t global_page, std::span<uint8_t> out) const;

  Result<std::vector<uint8_t>> ReadBlob(uint32_t index) const;
  Result<std::vector<uint8_t>> ReadBlob(std::string_view name) const;

  // Reads and checks every block and blob of every file of the chain, and every PAGE_HASHES entry against the
  // page it describes (hlt-restore verify). On a sealed() reader: every payload's checksum only (13.7).
  Status VerifyAll(const std::function<void(const VerifyProgress&)>& progress = {}) const;

  class Impl;

 private:
  friend class CheckpointRekeyer;  // checkpoint_rekey.h: reads stored content without decompressing it
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite

#endif  // HALITE_CHECKPOINT_READER_H_
