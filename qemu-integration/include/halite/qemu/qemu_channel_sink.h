// The restore engine's sink onto a push restore channel (halite/qemu/qemu_push_source.h): each batch the engine
// installs (one locality block, one fault's zero pages, or one large host page) becomes one RAM section, its
// zero runs ZERO records. One section per batch is what keeps a huge host page's records together: the engine
// gives all of a host page in one batch (halite/page_sink.h), and a section holds the stream until it closes, so
// no other thread's records come in between.
#ifndef HALITE_QEMU_QEMU_CHANNEL_SINK_H_
#define HALITE_QEMU_QEMU_CHANNEL_SINK_H_

#include <cstdint>
#include <span>
#include <vector>

#include "halite/page_sink.h"
#include "halite/qemu/qemu_push_source.h"
#include "halite/status.h"

namespace halite::qemu {

class ChannelSink final : public PageSink {
 public:
  // Borrows `channel` (must outlive the sink). block_of_region[r] is the RAMBlock of the checkpoint's region r.
  ChannelSink(PushRestoreChannel* channel, std::vector<uint32_t> block_of_region)
      : channel_(channel), block_of_region_(std::move(block_of_region)) {}

  // Errors: kInvalidArgument for a run of no region or with data of the wrong size; the section's errors
  // (kInternal for a page sent twice or a host page broken up; the channel's failure).
  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override;

  // Nothing is on the destination before the engine sends it: POSTCOPY_ADVISE discarded all of its RAM (lazy),
  // and an eager restore sends every page.
  bool IsPresent(PageRef) const override { return false; }

 private:
  PushRestoreChannel* channel_;
  std::vector<uint32_t> block_of_region_;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_CHANNEL_SINK_H_
