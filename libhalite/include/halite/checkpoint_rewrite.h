// A checkpoint written again from another: the same regions, pages, blobs and metadata, with a new layout.
//
// `hlt-save relayout` and `flatten` and the learned layouts of halite/learned_layout.h all read a checkpoint
// (through its chain) and write a full one: every stored page is verified on the way and given to a new writer,
// the caller's hints go first, then the source's own order (its blocks in restore order) keeps whatever
// locality the caller's hints do not decide.
#ifndef HALITE_CHECKPOINT_REWRITE_H_
#define HALITE_CHECKPOINT_REWRITE_H_

#include <functional>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/export.h"
#include "halite/status.h"

namespace halite {

struct HALITE_EXPORT RewriteOptions {
  // The new file's writer options; metadata is replaced by the source's (creation time included).
  WriterOptions writer;
  // Called after every page and blob is given and before the source's own order: the new hints (an access
  // trace, VA runs). Empty: none (a flatten).
  std::function<Status(CheckpointWriter&)> add_hints;
  // More blobs for the new file (name, bytes), after the source's.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> extra_blobs;
};

// Writes `out` from `source`. `out` must not be the source's own path (it is read while `out` is written).
// Nothing is left at `out` when it fails. Errors: the source's reads (a block that fails verification), the
// writer's.
HALITE_EXPORT Result<WriteSummary> RewriteCheckpoint(const CheckpointReader& source, const std::string& out,
                                                     RewriteOptions options);

// The source's blocks in restore order, each block's pages in slot order, as runs: the old layout, as hints.
HALITE_EXPORT std::vector<PageRun> RestoreOrderRuns(const CheckpointReader& source);

}  // namespace halite

#endif  // HALITE_CHECKPOINT_REWRITE_H_
