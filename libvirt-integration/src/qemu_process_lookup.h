// Finding the QEMU process libvirt started for a domain, by its command line: libvirt's API does not give a
// domain's pid, and its passthrough monitor has no socket peer to ask.
#ifndef HALITE_LIBVIRT_QEMU_PROCESS_LOOKUP_H_
#define HALITE_LIBVIRT_QEMU_PROCESS_LOOKUP_H_

#include <functional>
#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::libvirt {

// The first process of this host whose argument vector satisfies `match` (arguments split at NULs, as in
// /proc/PID/cmdline). kNotFound naming `what` when none does; kIoError when /proc cannot be listed.
Result<int> FindProcessByArguments(const std::function<bool(const std::vector<std::string>&)>& match,
                                   const std::string& what);

// True when `args` holds `flag` immediately followed by `value` ("-uuid" "..."), or an argument that starts with
// `value` when flag is empty.
bool HasArgument(const std::vector<std::string>& args, const std::string& flag, const std::string& value);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_QEMU_PROCESS_LOOKUP_H_
