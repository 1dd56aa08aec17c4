// What hlt-save prints after a save from QEMU (and, for its QEMU part, from libvirt): the access window's report
// (the page-table walk's is x86::PageTableHintReportText), the parent's image line, and the whole report of `hlt-save qemu`. Here so that the
// tools, the C API and the bindings print the same.
#ifndef HALITE_QEMU_QEMU_SAVE_REPORT_H_
#define HALITE_QEMU_QEMU_SAVE_REPORT_H_

#include <string>

#include "halite/qemu/qemu_checkpoint.h"
#include "halite/x86_guest_hints.h"

namespace halite::qemu {

// "  access window    N samples in ..." (or "... skipped: why").
std::string AccessWindowReportText(const CheckpointSaveResult& result);
// "  parent's image   QEMU maps FILE: N pages never written since ..." or why not; empty when not asked.
std::string ParentImageText(const CheckpointSaveResult& result);
// The whole report of `hlt-save qemu` of a save to `path`: the write summary, QEMU's stream, the guest's pause,
// the parent's image, the state blob, the access window and the page-table walk.
std::string QemuSaveReportText(const CheckpointSaveResult& result, const std::string& path);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_SAVE_REPORT_H_
