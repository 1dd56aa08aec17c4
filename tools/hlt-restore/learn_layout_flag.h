// --learn-layout (hlt-restore qemu and libvirt): restore from CKPT.learned when it was learned from CKPT;
// otherwise, once this lazy restore is complete, learn it from the blocks the guest waited for
// (halite/learned_layout.h). Prints one line for each step.
#ifndef HALITE_TOOLS_LEARN_LAYOUT_FLAG_H_
#define HALITE_TOOLS_LEARN_LAYOUT_FLAG_H_

#include <memory>
#include <span>
#include <string>

#include "halite/checkpoint_reader.h"

namespace halite::restore {

extern const char* kLearnLayoutHelp;

class LearnedLayoutChoice {
 public:
  // Opens `*ckpt`; when it has a learned layout, points *ckpt at it. Errors: opening `*ckpt`.
  Status Choose(std::string* ckpt, const ReaderOptions& options);
  // After a completed lazy restore that did not use a learned layout: writes one from `demanded` (the pages the
  // guest waited for, in order). Failures are printed, not returned: the restore itself succeeded.
  void LearnFrom(std::span<const PageRef> demanded);

 private:
  std::string source_path_;
  std::unique_ptr<CheckpointReader> source_;  // null once a learned layout is used
};

}  // namespace halite::restore

#endif  // HALITE_TOOLS_LEARN_LAYOUT_FLAG_H_
