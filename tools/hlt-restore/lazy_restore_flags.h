// What every mode that restores into QEMU shares (hlt-restore qemu, hlt-restore libvirt): the lazy-restore
// options and --learn-layout (the summary printed afterwards is the library's, halite/qemu/qemu_restore_report.h;
// the learned layout's choice halite/learned_layout.h).
#ifndef HALITE_TOOLS_LAZY_RESTORE_FLAGS_H_
#define HALITE_TOOLS_LAZY_RESTORE_FLAGS_H_

#include <string>

#include "common/cli.h"
#include "common/cli_parser.h"
#include "halite/qemu/qemu_checkpoint.h"

namespace halite::restore {

extern const char* kLazyRestoreFlagsHelp;
extern const char* kLearnLayoutHelp;

// --eager, --loader on|off, --idle-ms N, --rate-limit R, --loader-threads N, --placement P, --preload-ws as given.
struct LazyRestoreFlagValues {
  bool eager = false;
  bool preload_ws = false;
  std::string loader, idle_ms, rate_limit, loader_threads, placement;
};
void AddLazyRestoreFlags(CLI::App& app, LazyRestoreFlagValues* values);
// Puts the flags given into *options; returns the usage error (e.g. "--loader-threads: expected 1 to 16, got
// \"0\""), empty when fine.
std::string ApplyLazyRestoreFlags(const CLI::App& app, const LazyRestoreFlagValues& values,
                                  qemu::CheckpointRestoreOptions* options);
// Whether any of them was given.
bool AnyLazyRestoreFlag(const CLI::App& app);

// The combinations that make no sense; empty when fine.
std::string CheckLazyRestoreFlags(const qemu::CheckpointRestoreOptions& options);

// Prints --learn-layout's line (LearnedLayoutChoice): on stdout, or a failure to learn as a warning on stderr (the
// restore itself succeeded).
void PrintLearnedLayout(const Result<std::string>& line);

}  // namespace halite::restore

#endif  // HALITE_TOOLS_LAZY_RESTORE_FLAGS_H_
