// Learned layouts of golden checkpoints: REAP's record-and-relayout, in the broker's own flow.
//
// A broker restores many clones of one golden checkpoint. The first clone's restore shows which blocks its guest
// had to wait for, in which order: those the layout and the restore order did not bring in time. Its restorer
// then writes a learned layout beside the checkpoint (CKPT.learned: the same pages, blobs and metadata) whose hot
// blocks are the golden's own working set followed by the blocks the first clone demanded, in demand order; the
// rest keeps the golden's order. Every later restore that asks for learning finds it and restores from it, so its
// loader (and a working-set preload) brings those blocks first.
//
// The learned file names the checkpoint it was learned from (its file_id, blob kLearnedFromBlobName): a golden
// replaced by a new one under the same name is never restored through a stale learned file. Writing it is atomic
// (temporary name, rename) and one restorer at a time writes it (a lock file beside it, for local files).
#ifndef HALITE_LEARNED_LAYOUT_H_
#define HALITE_LEARNED_LAYOUT_H_

#include <memory>
#include <span>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/export.h"
#include "halite/status.h"

namespace halite {

inline constexpr const char* kLearnedFromBlobName = "halite.learned-from";

// CKPT + ".learned" (a path or an s3:// / rados:// URI alike).
HALITE_EXPORT std::string LearnedLayoutPath(const std::string& checkpoint);

// The learned layout of `source` (opened from `checkpoint`), when there is one learned from exactly it; nullptr
// with `*why_not` saying why not otherwise (none yet, learned from another file, unreadable). Never an error: a
// restore goes on from the checkpoint itself.
HALITE_EXPORT std::unique_ptr<CheckpointReader> OpenLearnedLayout(const std::string& checkpoint,
                                                                  const CheckpointReader& source,
                                                                  const ReaderOptions& options, std::string* why_not);

struct HALITE_EXPORT LearnReport {
  std::string path;            // the learned layout written; empty when none was (see skipped)
  std::string skipped;         // why nothing was written
  uint32_t hot_blocks_before = 0;  // the source's working set (blocks)
  uint32_t demanded_blocks = 0;    // distinct blocks of the demanded pages
  uint32_t new_blocks = 0;         // of those, not in the source's working set
  uint64_t trace_pages = 0;        // pages given as the new access trace
  WriteSummary summary;
};

// Writes the learned layout of `source` from the pages its restore demanded, in order (a QEMU restore's
// requested pages). Nothing is written (report.skipped) when no page was demanded outside the working set, or
// another restorer is writing one. Errors: the source's reads and the writer's (nothing is left behind then).
HALITE_EXPORT Result<LearnReport> LearnLayout(const std::string& checkpoint, const CheckpointReader& source,
                                              std::span<const PageRef> demanded, WriterOptions writer);

// A restore that asks for learning (hlt-restore qemu and libvirt --learn-layout): Choose before the restore, then
// LearnFrom once it completed lazily. Each returns the line the tools print ("learned layout   ..."). Not
// thread-safe; one restore per instance.
class HALITE_EXPORT LearnedLayoutChoice {
 public:
  LearnedLayoutChoice();
  ~LearnedLayoutChoice();
  // Opens `*ckpt`; when it has a learned layout, points *ckpt at it. Returns the line that says which is restored.
  // Errors: opening `*ckpt`.
  Result<std::string> Choose(std::string* ckpt, const ReaderOptions& options);
  // After a completed lazy restore that did not use a learned layout: writes one from `demanded` (the pages the
  // guest waited for, in order) with low-priority workers (the restored guest runs meanwhile). Returns the line
  // that says what was written, empty when Choose chose a learned layout. Errors: LearnLayout's (the restore itself
  // succeeded: a warning).
  Result<std::string> LearnFrom(std::span<const PageRef> demanded);

 private:
  std::string source_path_;
  std::unique_ptr<CheckpointReader> source_;  // null once a learned layout is used
};

}  // namespace halite

#endif  // HALITE_LEARNED_LAYOUT_H_
