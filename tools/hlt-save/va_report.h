// The access window's flags of every hlt-save mode that walks a guest (the reports are the library's,
// halite/qemu/qemu_save_report.h).
#ifndef HALITE_TOOLS_VA_REPORT_H_
#define HALITE_TOOLS_VA_REPORT_H_

#include <string>

#include "halite/qemu/qemu_checkpoint.h"
#include "halite/x86_guest_hints.h"
#include "common/cli.h"
#include "common/cli_parser.h"

namespace halite::save {


// --access-window SECONDS and --access-interval MS (hlt-save qemu and libvirt), as given; ApplyAccessWindowFlags
// checks and converts them (the usage error, empty when fine).
struct AccessWindowText {
  std::string window, interval;
};
void AddAccessWindowFlags(CLI::App& app, AccessWindowText* text);
std::string ApplyAccessWindowFlags(const CLI::App& app, const AccessWindowText& text, qemu::AccessWindowOptions* window);
inline constexpr const char* kAccessWindowHelp =
    "  --access-window S      a running guest: sample the accessed bits of its page tables for S seconds\n"
    "                         before the save (default 2; 0: off); the pages it touched, in the order the\n"
    "                         samples saw them, become the working set (restored first). Each sample pauses\n"
    "                         the guest for a few milliseconds\n"
    "  --access-interval MS   between samples (default 200)\n";

}  // namespace halite::save

#endif  // HALITE_TOOLS_VA_REPORT_H_
