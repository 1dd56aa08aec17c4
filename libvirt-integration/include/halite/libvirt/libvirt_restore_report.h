// What `hlt-restore libvirt` prints of a completed restore, here so that the tools, the C API and the bindings
// print the same.
#ifndef HALITE_LIBVIRT_LIBVIRT_RESTORE_REPORT_H_
#define HALITE_LIBVIRT_LIBVIRT_RESTORE_REPORT_H_

#include <string>

#include "halite/libvirt/libvirt_checkpoint.h"

namespace halite::libvirt {

// What a completed restore of `checkpoint` made: "restored CKPT as domain NAME (uuid U)[, a clone]", then the
// domain's start, its disk overlays, its own files, NVRAM and TPM copies, the clock and the NICs, a line each.
// The summary of the memory restore is qemu::RestoreSummaryText(result.qemu, ...).
std::string RestoredDomainText(const std::string& checkpoint, bool clone, const LibvirtRestoreResult& result);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_RESTORE_REPORT_H_
