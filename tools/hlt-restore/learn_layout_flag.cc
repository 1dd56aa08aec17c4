#include "hlt-restore/learn_layout_flag.h"

#include <cstdio>

#include "common/cli.h"
#include "halite/learned_layout.h"

namespace halite::restore {

const char* kLearnLayoutHelp =
    "  --learn-layout         for many restores of one golden checkpoint: restore from CKPT.learned when it was\n"
    "                         learned from CKPT; otherwise, once this lazy restore is complete, write it: the\n"
    "                         golden's working set, then the blocks this guest had to wait for, in that order,\n"
    "                         restored first by the next restores (REAP's record and relayout)\n";

Status LearnedLayoutChoice::Choose(std::string* ckpt, const ReaderOptions& options) {
  HLT_ASSIGN_OR_RETURN(source_, CheckpointReader::Open(*ckpt, options));
  source_path_ = *ckpt;
  std::string why_not;
  if (OpenLearnedLayout(*ckpt, *source_, options, &why_not) != nullptr) {
    *ckpt = LearnedLayoutPath(*ckpt);
    source_.reset();
    std::printf("learned layout   restoring from %s (learned from a first restore of %s)\n", ckpt->c_str(),
                source_path_.c_str());
  } else {
    std::printf("learned layout   none used: %s; this restore will learn one\n", why_not.c_str());
  }
  std::fflush(stdout);
  return Status::Ok();
}

void LearnedLayoutChoice::LearnFrom(std::span<const PageRef> demanded) {
  if (!source_) return;
  WriterOptions w;
  w.low_priority_workers = true;  // the restored guest runs meanwhile
  auto learned = LearnLayout(source_path_, *source_, demanded, std::move(w));
  if (!learned) {
    std::fprintf(stderr, "hlt-restore: warning: no learned layout written: %s\n", learned.error().ToString().c_str());
  } else if (learned->path.empty()) {
    std::printf("learned layout   not written: %s\n", learned->skipped.c_str());
  } else {
    std::printf("learned layout   %s written in %.2f s: %u working-set blocks, then %u blocks this restore waited "
                "for (%u in all, %llu pages hot)\n",
                learned->path.c_str(), learned->summary.seconds, learned->hot_blocks_before, learned->new_blocks,
                learned->demanded_blocks, (unsigned long long)learned->trace_pages);
  }
  std::fflush(stdout);
}

}  // namespace halite::restore
