// The names of the QEMU integration's choices, as the tools' flags, the C API and the bindings spell them
// (hlt-save qemu --then, hlt-restore --placement). Errors: kInvalidArgument "expected A, B or C, got \"X\"", for the
// caller to prefix with its flag's name.
#ifndef HALITE_QEMU_QEMU_OPTION_NAMES_H_
#define HALITE_QEMU_QEMU_OPTION_NAMES_H_

#include <string_view>

#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_session.h"
#include "halite/status.h"

namespace halite::qemu {

// stop, quit or cont: what becomes of the saved guest.
Result<SaveOptions::Then> ParseSaveThen(std::string_view name);
// auto, direct or channel: where a restore's pages go (PagePlacement).
Result<PagePlacement> ParsePagePlacement(std::string_view name);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_OPTION_NAMES_H_
