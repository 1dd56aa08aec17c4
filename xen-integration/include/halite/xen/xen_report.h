// What `hlt-save xen` and `hlt-restore xen` print of a save or an export, here so that the tools, a toolstack
// embedding the library and the bindings print the same.
#ifndef HALITE_XEN_XEN_REPORT_H_
#define HALITE_XEN_XEN_REPORT_H_

#include <string>

#include "halite/xen/xen_checkpoint.h"

namespace halite::xen {

// The writer's summary of CKPT `path`, then "  xen stream ...", "  xen physmap ..." and the page-table walk's lines
// ("  va walk          off (--no-va)" when `va_walk` was off).
std::string XenSaveReportText(const SaveResult& result, const std::string& path, bool va_walk);

// "exported CKPT -> OUT: N bytes, ...": one line; `out` "-" reads "stdout".
std::string XenExportReportText(const std::string& checkpoint, const std::string& out, const ExportStats& stats);

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_REPORT_H_
