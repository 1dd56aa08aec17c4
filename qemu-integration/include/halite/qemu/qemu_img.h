// Running qemu-img (package qemu-utils), the tool that creates and inspects QEMU's disk image formats.
#ifndef HALITE_QEMU_QEMU_IMG_H_
#define HALITE_QEMU_QEMU_IMG_H_

#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::qemu {

// Runs `qemu-img ARGS...` (found on PATH) and waits for it. kIoError when it cannot be started or does not exit
// 0, naming the command line, how it ended and what qemu-img wrote on stderr (its reason). What it writes on stderr
// when it succeeds (warnings) is passed on to this process's stderr.
Status RunQemuImg(const std::vector<std::string>& args);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_IMG_H_
