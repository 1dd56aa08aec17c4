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
// RestoredDomainText and the summary of the memory restore: what `hlt-restore libvirt` prints at the end.
// `tool_to_running_us`: from the caller's start to the guest running.
std::string RestoredDomainReportText(const std::string& checkpoint, bool clone, const LibvirtRestoreResult& result,
                                     uint64_t tool_to_running_us);

// "  before the call  libvirt opened 1.0 ms, checkpoint opened 2.0 ms, ...": where the time before the memory
// restore's call went, one line (RestoredDomainText's second).
std::string PhasesText(const LibvirtRestoreResult::Phases& phases);
// "running NAME 12.3 ms after hlt-restore started": the first line of a restore, which a detaching parent prints.
// A detached restore (`detached_status_path` not empty) adds where its outcome goes and this process's pid.
std::string DomainRunningText(const std::string& name, double tool_to_running_ms,
                              const std::string& detached_status_path);
// "guest resumed: domain D gets its pages again 12.3 ms after hlt-restore started": a take-over's resume.
std::string DomainResumedText(const std::string& domain, double tool_to_resumed_ms);
// A completed take-over: "resumed the restore of domain D: QEMU held N pages already" and the summary.
std::string ResumedRestoreText(const std::string& domain, const LibvirtRestoreResult& result);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_RESTORE_REPORT_H_
