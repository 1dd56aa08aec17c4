// LearnedLayoutChoice (moved here from tools/hlt-restore/learn_layout_flag.cc, its lines unchanged).
#include <fmt/printf.h>

#include "halite/learned_layout.h"

namespace halite {

LearnedLayoutChoice::LearnedLayoutChoice() = default;
LearnedLayoutChoice::~LearnedLayoutChoice() = default;

Result<std::string> LearnedLayoutChoice::Choose(std::string* ckpt, const ReaderOptions& options) {
  HLT_ASSIGN_OR_RETURN(source_, CheckpointReader::Open(*ckpt, options));
  source_path_ = *ckpt;
  std::string why_not;
  if (OpenLearnedLayout(*ckpt, *source_, options, &why_not) == nullptr) {
    return fmt::sprintf("learned layout   none used: %s; this restore will learn one\n", why_not);
  }
  *ckpt = LearnedLayoutPath(*ckpt);
  source_.reset();
  return fmt::sprintf("learned layout   restoring from %s (learned from a first restore of %s)\n", *ckpt,
                      source_path_);
}

Result<std::string> LearnedLayoutChoice::LearnFrom(std::span<const PageRef> demanded) {
  if (!source_) return std::string();
  WriterOptions w;
  w.low_priority_workers = true;  // the restored guest runs meanwhile
  HLT_ASSIGN_OR_RETURN(LearnReport learned, LearnLayout(source_path_, *source_, demanded, std::move(w)));
  if (learned.path.empty()) return fmt::sprintf("learned layout   not written: %s\n", learned.skipped);
  return fmt::sprintf("learned layout   %s written in %.2f s: %u working-set blocks, then %u blocks this restore "
                      "waited for (%u in all, %llu pages hot)\n",
                      learned.path, learned.summary.seconds, learned.hot_blocks_before, learned.new_blocks,
                      learned.demanded_blocks, (unsigned long long)learned.trace_pages);
}

}  // namespace halite
