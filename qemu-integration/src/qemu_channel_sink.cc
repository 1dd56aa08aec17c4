// halite/qemu/qemu_channel_sink.h: one RAM section per batch.
#include "halite/qemu/qemu_channel_sink.h"

#include <string>

namespace halite::qemu {

Status ChannelSink::Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) {
  *runs_installed = 0;
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<RamSection> section, channel_->OpenSection(priority));
  for (const PageInstall& run : batch) {
    if (run.first.region >= block_of_region_.size() ||
        (!run.zero() && run.data.size() != run.count * kTargetPageSize)) {
      return Status::InvalidArgument("install of region " + std::to_string(run.first.region) + " pages " +
                                     std::to_string(run.first.page) + "+" + std::to_string(run.count));
    }
    const PageId id{block_of_region_[run.first.region], run.first.page};
    HLT_RETURN_IF_ERROR(run.zero() ? section->AddZeroPages(id, run.count)
                                   : section->AddPages(id, run.count, run.data.data()));
    ++*runs_installed;
  }
  return section->Close();
}

}  // namespace halite::qemu
