// Finding the QEMU process libvirt started for a domain, by its command line: libvirt's API does not give a
// domain's pid, and its passthrough monitor has no socket peer to ask.
#ifndef HALITE_LIBVIRT_QEMU_PROCESS_LOOKUP_H_
#define HALITE_LIBVIRT_QEMU_PROCESS_LOOKUP_H_

#include <functional>
#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::libvirt {

// The one process of this host whose argument vector satisfies `match` (arguments split at NULs, as in
// /proc/PID/cmdline). kNotFound naming `what` when none does; kInvalidArgument naming the PIDs when several
// do (never a guess); kIoError when /proc cannot be listed.
Result<int> FindProcessByArguments(const std::function<bool(const std::vector<std::string>&)>& match,
                                   const std::string& what);

// True when `args` holds `flag` immediately followed by `value` ("-uuid" "..."), or an argument that starts with
// `value` when flag is empty.
bool HasArgument(const std::vector<std::string>& args, const std::string& flag, const std::string& value);

// A restore's private QMP socket is DIR.qmp.sock, beside DIR, its scratch directory (/tmp/hlt-libvirt-XXXXXX);
// before, DIR/qmp.sock. RemovePrivateQmpSocketDir removes DIR (empty by then) for either.
inline constexpr const char* kPrivateQmpSocketSuffix = ".qmp.sock";
void RemovePrivateQmpSocketDir(const std::string& socket_path);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_QEMU_PROCESS_LOOKUP_H_
