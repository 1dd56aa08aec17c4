// Starting one of this program's own servers (`hlt-restore serve`, `serve-ram-dir`) detached from the restore
// that needs it: its own session, stdin from /dev/null, stdout and stderr into a log file, so that it outlives the
// restore and every later clone finds it.
#ifndef HALITE_QEMU_DETACHED_SERVER_H_
#define HALITE_QEMU_DETACHED_SERVER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::qemu {

// Runs `self` with `args` (args[0] is the mode, e.g. "serve") in the background; returns its pid. The caller
// waits for it to come up (a mount appearing) and reads `log_path` when it does not.
Result<pid_t> StartDetachedServer(const std::string& self, const std::vector<std::string>& args,
                                  const std::string& log_path);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_DETACHED_SERVER_H_
