// What every mode that restores into QEMU shares (hlt-restore qemu, hlt-restore libvirt): the lazy-restore
// options and the summary printed afterwards.
#ifndef HALITE_TOOLS_LAZY_RESTORE_FLAGS_H_
#define HALITE_TOOLS_LAZY_RESTORE_FLAGS_H_

#include <string>

#include "common/cli.h"
#include "halite/qemu/qemu_checkpoint.h"

namespace halite::restore {

extern const char* kLazyRestoreFlagsHelp;

// Consumes one of --eager, --loader on|off, --idle-ms N, --rate-limit R, --loader-threads N, --preload-ws;
// false when the next argument is none of them. Errors go to *error.
bool ParseLazyRestoreFlag(cli::Args& args, qemu::CheckpointRestoreOptions* options, std::string* error);
// The combinations that make no sense; empty when fine.
std::string CheckLazyRestoreFlags(const qemu::CheckpointRestoreOptions& options);

// "  time ... / requests ... / pages sent ... / faults ... / blocks read ... / bytes read ..." lines.
void PrintRestoreSummary(const qemu::CheckpointRestoreResult& result, uint64_t tool_to_running_us);

}  // namespace halite::restore

#endif  // HALITE_TOOLS_LAZY_RESTORE_FLAGS_H_
