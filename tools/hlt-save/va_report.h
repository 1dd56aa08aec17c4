// The page-table walk's report, printed the same way by every hlt-save mode that walks a guest.
#ifndef HALITE_TOOLS_VA_REPORT_H_
#define HALITE_TOOLS_VA_REPORT_H_

#include "halite/x86_guest_hints.h"

namespace halite::save {

void PrintVaReport(const x86::PageTableHintReport& va);

}  // namespace halite::save

#endif  // HALITE_TOOLS_VA_REPORT_H_
