// CheckpointWriter: builds a checkpoint from pages given in any order, plus hints, blobs and metadata.
//
// Usage: Create(); AddRegion() for each region; PutPage()/AttachImage() for the content; optionally the
// save-time access order (AddAccessedPages) and virtual-address adjacency (AddVaRun); AddBlob() for device
// state; Finish(). Until Finish() succeeds nothing exists under the output name; a writer destroyed without
// Finish() (or one whose Finish() failed) leaves nothing behind.
//
// Memory: page data is staged in an unlinked temporary file (or read back from an attached image), never held
// in memory as a whole. Per page the writer keeps 25 bytes (state, staging location, XXH3-128 hash) plus a
// dedup table entry per distinct stored page (~40 bytes); data buffers are bounded by
// threads x 2 x block_pages x 4 KiB (+ zstd contexts). For a 4 GiB guest: ~26 MiB + ~40 MiB worst case.
//
// Thread-safety: one thread calls the writer; compression runs on the writer's own worker pool.
#ifndef HALITE_CHECKPOINT_WRITER_H_
#define HALITE_CHECKPOINT_WRITER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halite/export.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_types.h"
#include "halite/encryption.h"
#include "halite/hint_files.h"
#include "halite/status.h"
#include "halite/storage.h"

namespace halite {

// How pages are ordered into locality blocks (format-spec section 10).
enum class LayoutPolicy {
  kHalite,    // save-time access order, then virtual-address adjacency, then physical order
  kAccess,    // access order, then physical order
  kVa,        // virtual-address adjacency, then physical order
  kPhysical,  // physical order only
};
HALITE_EXPORT Result<LayoutPolicy> ParseLayoutPolicy(std::string_view name);
HALITE_EXPORT const char* LayoutPolicyName(LayoutPolicy policy);

// Whether blocks are compressed with a zstd dictionary trained on sampled pages.
enum class DictionaryMode {
  kAuto,  // train one (and a quarter of it), measure both on sample blocks, keep the better if it makes them (its
          // size included) >= 1% smaller; none trained when the sample hardly compresses (coding_choice.cc)
  kOff,
  kOn,  // always, when training succeeds (the better of the two sizes)
};
HALITE_EXPORT Result<DictionaryMode> ParseDictionaryMode(std::string_view name);

struct HALITE_EXPORT WriteProgress {
  uint64_t blocks_done = 0, blocks_total = 0;
  uint64_t raw_bytes_done = 0, raw_bytes_total = 0;
};

struct HALITE_EXPORT WriterOptions {
  // Default chosen from bench/ (see bench/README.md): 64 pages (256 KiB raw) keeps compression within a few
  // percent of whole-file zstd while one fault reads ~60-100 KiB and decompresses in well under a millisecond.
  uint32_t block_pages = 64;
  int level = 3;
  // A compressed block's zstd frame is cut into zstd blocks of this many pages (format-spec 5.4), so a restore
  // can decode it piece by piece and install a faulting page before the rest of its block is decoded. Costs
  // ~8% more decoding instructions for a whole block at 8 pages (bench/engine/README.md), no file size. 0:
  // zstd's own 128 KiB blocks, as writers did before; readers decode both.
  uint32_t zstd_block_pages = 8;
  // A compressed block of more pages than this is stored as independent zstd frames of this many pages each
  // (format-spec 5.4, FRAMED; the file is then a 1.3 file), so a fault decodes its page's frame first and
  // never the frames before it. kFramePagesAuto (the default) chooses from the data, with the dictionary (see
  // `dictionary`): frames of 16 pages, or 32 when a sample of blocks is 3% smaller so (a warm 64-page block fault
  // then waits for at most 32 pages to be decoded: bench/core/README.md). 16 (with 8-page cuts): a warm 64-page
  // block fault wakes its thread in 74-112 us at any slot instead of 104-255 us for one frame, for 2% to 19% more
  // file without a dictionary, depending on the memory (bench/engine/README.md, bench/core/README.md). 0: one frame
  // per block, as before (a 1.2 file).
  static constexpr uint32_t kFramePagesAuto = UINT32_MAX;
  uint32_t frame_pages = kFramePagesAuto;
  // A region whose host pages are larger than 4 KiB (hugetlbfs) is planned a host page at a time, none split
  // between blocks, so that a restore reads one block per host page (format-spec 10). false: such pages are
  // planned like any others, as writers did before (a restore then gathers a host page from every block holding
  // one of its pages; bench/engine/bench_hugepage compares the two).
  bool keep_host_pages_whole = true;
  unsigned threads = 0;                 // compression workers; 0 = one per CPU
  // Compression workers at nice 10: on a CPU shared with a normal thread they get about a tenth of it, so a guest
  // that runs while its checkpoint is compressed (hlt-save --live, or --then cont) keeps its CPUs, and the save
  // takes longer only when the host has no idle CPU. hlt-save qemu and libvirt set it when the guest runs.
  bool low_priority_workers = false;
  uint64_t rate_limit_bytes_per_s = 0;  // raw page bytes compressed per second; 0 = unlimited
  LayoutPolicy policy = LayoutPolicy::kHalite;
  DictionaryMode dictionary = DictionaryMode::kAuto;
  FileSinkOptions sink;
  Metadata metadata;               // created_unix_ns 0 means "now" unless deterministic is set
  std::optional<FileId> file_id;   // random when unset
  bool deterministic = false;      // keep created_unix_ns as given (0), for test vectors
  std::string staging_dir;         // where staged pages go; default: the output's directory
  std::optional<std::array<uint8_t, 32>> mac_key;  // authenticate the checkpoint with this key (format-spec 5.8)
  // Encrypt the checkpoint with this key (format-spec 13; the file is then a 1.5 file): every block (frame by frame
  // when FRAMED), every blob and the index sections that reveal content are AEAD ciphertext under a key derived for
  // this file, and the header names the key by its id. Pages staged on disk before Finish() are encrypted too,
  // under a random key that never leaves this writer's memory. Not with mac_key (the tags authenticate), and not
  // with a chosen file_id unless `deterministic` (test vectors): each file gets a fresh random one, so that no nonce
  // repeats under a key.
  std::optional<EncryptionKey> encryption_key;
  Cipher cipher = Cipher::kAuto;  // kAuto: AES-256-GCM with AES-NI, XChaCha20-Poly1305 without
  // Incremental checkpoint (format-spec 12): a page whose bytes equal `parent`'s view of the same page number is
  // stored as a reference into it (IN_PARENT). Decided on bytes, never on a hash alone: when the parent has
  // PAGE_HASHES, a differing hash rules a page out without decoding anything, and an equal one is confirmed
  // against the parent's decoded page. A zero (absent) page is IN_PARENT where the parent's is zero (absent) too.
  // When no page matches, the file gets no PARENT section and is complete. The reader must stay open until Finish() returns; the chain may hold at most 16
  // parent links.
  std::shared_ptr<const CheckpointReader> parent;
  // The parent's path relative to the output's directory, recorded in the PARENT section. Create(path) derives
  // it from parent->name() when empty; Create(sink) needs it.
  std::string parent_path_hint;
  // Incremental saves: where the layout of a flat checkpoint of the same content would put a block of which at
  // least this fraction changed since the parent, the child stores the whole block, its unchanged pages again too,
  // so that restoring the chain reads that block once, from the child, instead of the child's block and the
  // parent's (bench/chain measures it). A child grows by the unchanged pages of such blocks; pages changed here
  // and there (less than this fraction of any block) stay references. Above 1: every equal page is a reference.
  double parent_rewrite_fraction = 0.25;
  // Write the PAGE_HASHES section (5.11): 8 bytes per stored page (0.2% of the stored pages' raw size), so that a
  // child of this checkpoint rules out changed pages without decoding this file's blocks.
  bool page_hashes = false;
  // Incremental saves: code changed pages against the parent (format-spec 5.4 BASED, since 1.4). A changed page
  // whose parent version lies in a block group of the parent's view that a restore of the child reads anyway (it
  // keeps a page of every block of the group) is stored, with that group's other changed pages, in a block
  // compressed against the group's content, when a trial shows that pays (the pages come to at most 3/4 of their
  // size alone); a restore reads the two together, each block once. Pages of the working set, pages stored again for
  // locality and pages of large host pages are never based. false: every changed page is coded on its own, as
  // before (a 1.2 or 1.3 file).
  bool code_against_parent = true;
  std::function<void(const WriteProgress&)> progress;  // called from the writing thread
};

struct HALITE_EXPORT WriteSummary {
  uint64_t pages = 0;            // all pages of all regions
  uint64_t zero_pages = 0;       // all-zero pages (not stored)
  uint64_t absent_pages = 0;     // pages never given
  uint64_t duplicate_pages = 0;  // pages stored once elsewhere
  uint64_t stored_pages = 0;     // distinct pages stored in blocks (pages = zero + absent + duplicate + stored;
                                 // hlt-restore info's stored_pages includes the duplicates)
  uint64_t blocks = 0;
  uint64_t hot_blocks = 0;
  uint64_t accessed_pages = 0;   // distinct non-zero pages of the access trace
  uint64_t raw_bytes = 0;        // pages * 4096
  uint64_t block_bytes = 0;      // block payload bytes
  uint64_t blob_bytes = 0;       // blob payload bytes
  uint64_t index_bytes = 0;
  uint64_t dictionary_bytes = 0; // 0 when no dictionary is used
  uint64_t in_parent_pages = 0;  // pages stored as references into the parent (IN_PARENT)
  uint64_t parent_blocks_read = 0;  // parent blocks decoded to confirm equal pages
  uint64_t stored_again_pages = 0;  // equal to the parent's, stored again to keep a block whole (parent_rewrite_fraction)
  uint64_t declared_in_parent_pages = 0;  // of in_parent_pages: declared by the caller (DeclareInParent), not compared
  uint64_t page_hash_bytes = 0;  // the PAGE_HASHES section, 0 when not written
  // The coding (format-spec 5.4): frames of frame_pages pages (0: one frame a block), the dictionary when
  // dictionary_bytes > 0, and why: the sample's size each way tried (empty when nothing was sampled), in words. The
  // file records the same in its CODING section (5.12) when the writer chose anything itself.
  uint32_t frame_pages = 0;
  std::vector<CodingRecord::Trial> coding_trials;
  std::string coding_reason;
  // Incremental saves: blocks coded against the parent (BASED), the pages they hold, and the parent's block groups
  // tried for it (those holding a changed page and read anyway) with how many passed the trial.
  uint64_t based_blocks = 0;
  uint64_t based_pages = 0;
  uint64_t base_groups_tried = 0;
  uint64_t base_groups_used = 0;
  uint64_t file_bytes = 0;
  // Format-spec 13: the file is encrypted, with this cipher and the key of this id.
  bool encrypted = false;
  Cipher cipher = Cipher::kAuto;
  KeyId key_id{};
  double seconds = 0;
  double ratio() const { return file_bytes ? double(raw_bytes) / double(file_bytes) : 0; }
};

class HALITE_EXPORT CheckpointWriter {
 public:
  // Output goes to `path` through a crash-safe atomic file sink.
  static Result<std::unique_ptr<CheckpointWriter>> Create(const std::string& path, WriterOptions options);
  // Output goes to the given sink (memory, remote object store, fault injection).
  static Result<std::unique_ptr<CheckpointWriter>> Create(std::unique_ptr<AppendSink> sink, WriterOptions options);
  ~CheckpointWriter();

  // Adds a region; returns its index. size must be a multiple of 4096 and of host_page_size.
  Result<uint32_t> AddRegion(const std::string& name, uint64_t guest_phys_base, uint64_t size,
                             uint32_t host_page_size = 4096);
  const std::vector<Region>& regions() const;
  // Grows the region added last to `new_size` (a multiple of its host page size, not smaller than it was): for
  // a stream that learns its highest page only as it goes (Xen's).
  Status ExtendLastRegion(uint64_t new_size);

  // Gives one page (4096 bytes, copied). Any order; a page given again replaces the earlier copy (live
  // streams). Pages never given are recorded as absent.
  Status PutPage(uint32_t region, uint64_t page, std::span<const uint8_t> data);
  // Marks pages as all zero without giving their bytes.
  Status PutZeroPages(uint32_t region, uint64_t first_page, uint64_t count);
  // Makes pages absent again: pages given earlier and then taken back (a Xen stream's XTAB entries for pages a
  // balloon reclaimed after they were sent).
  Status ForgetPages(uint32_t region, uint64_t first_page, uint64_t count);
  // Reading back what was given, before Finish(): the page-table walk (halite/x86_guest_hints.h) reads guest
  // memory from here, so no integration keeps its own copy. Call from the thread that gives the pages.
  enum class PageContent : uint8_t { kAbsent, kZero, kData };
  PageContent ContentOf(uint32_t region, uint64_t page) const;  // kAbsent outside the regions too
  // Copies the page into `out` (a zero page reads as zeros); false when it is absent. Errors: the staging file's.
  Result<bool> ReadPage(uint32_t region, uint64_t page, std::span<uint8_t, 4096> out) const;
  // Incremental saves (WriterOptions::parent): the caller knows, without their bytes, that these pages equal the
  // parent's view of the same pages, e.g. the kernel reports them never written in a private mapping of the
  // parent's image (a clone restored with --memory shared). They are recorded IN_PARENT without being compared,
  // and content later given for them is ignored (not staged, not hashed). The caller is trusted: a page declared
  // here that differs from the parent restores as the parent's. ContentOf and ReadPage answer for them from the
  // parent. The region must be laid out as the parent's region of the same index (same name, same first page).
  // Errors: invalid-argument without a parent, outside the region, or for a region the parent lays out otherwise.
  Status DeclareInParent(uint32_t region, uint64_t first_page, uint64_t count);
  // Uses `image_path` as the whole content of `region` (page p at offset p*4096), read in place instead of
  // staged. The file must stay unchanged until Finish() returns. Its size must equal the region's.
  Status AttachImage(uint32_t region, const std::string& image_path);

  // Hints. Access order: pages in the order the guest touched them during the save (first occurrence counts).
  Status AddAccessedPages(std::span<const PageRun> runs);
  // Virtual-address adjacency: runs in virtual-address order; address_space separates spaces.
  Status AddVaRuns(std::span<const PageRun> runs);

  // Adds an opaque named blob (device state). Compressed when that helps.
  Status AddBlob(const std::string& name, std::span<const uint8_t> data);

  // Plans, deduplicates, compresses and writes everything, then commits the file.
  Result<WriteSummary> Finish();

  class Impl;

 private:
  explicit CheckpointWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite

#endif  // HALITE_CHECKPOINT_WRITER_H_
