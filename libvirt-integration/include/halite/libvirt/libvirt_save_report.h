// What `hlt-save libvirt` prints after a save, here so that the tools, the C API and the bindings print the same.
#ifndef HALITE_LIBVIRT_LIBVIRT_SAVE_REPORT_H_
#define HALITE_LIBVIRT_LIBVIRT_SAVE_REPORT_H_

#include <string>

#include "halite/libvirt/libvirt_checkpoint.h"

namespace halite::libvirt {

// The report of a save of a domain (through libvirt `uri`) to `path`: the write summary, the domain's stream and
// pause, the parent's image, the frozen disks, NVRAM and TPM state, the access window and the page-table walk.
std::string LibvirtSaveReportText(const LibvirtSaveResult& result, const std::string& uri, const std::string& path);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_SAVE_REPORT_H_
