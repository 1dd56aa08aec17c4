#include "halite/qemu/qemu_option_names.h"

#include <string>

namespace halite::qemu {

Result<SaveOptions::Then> ParseSaveThen(std::string_view name) {
  if (name == "stop") return SaveOptions::Then::kLeaveStopped;
  if (name == "quit") return SaveOptions::Then::kQuit;
  if (name == "cont") return SaveOptions::Then::kContinue;
  return Status::InvalidArgument("expected stop, quit or cont, got \"" + std::string(name) + "\"");
}

Result<PagePlacement> ParsePagePlacement(std::string_view name) {
  if (name == "auto") return PagePlacement::kAuto;
  if (name == "direct") return PagePlacement::kDirect;
  if (name == "channel") return PagePlacement::kChannel;
  return Status::InvalidArgument("expected auto, direct or channel, got \"" + std::string(name) + "\"");
}

}  // namespace halite::qemu
