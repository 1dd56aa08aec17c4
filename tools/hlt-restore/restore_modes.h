// The modes of hlt-restore, one file each.
#ifndef HALITE_TOOLS_RESTORE_MODES_H_
#define HALITE_TOOLS_RESTORE_MODES_H_

#include "common/cli.h"

namespace halite::restore {

int RestoreRaw(cli::Args& args);
int Info(cli::Args& args);
int Verify(cli::Args& args);

}  // namespace halite::restore

#endif  // HALITE_TOOLS_RESTORE_MODES_H_
