// The modes of hlt-restore, one file each.
#ifndef HALITE_TOOLS_RESTORE_MODES_H_
#define HALITE_TOOLS_RESTORE_MODES_H_

#include "common/cli.h"

namespace halite::restore {

int RestoreRaw(cli::Args& args);
int RestoreXen(cli::Args& args);  // restore_xen.cc, built with the Xen integration
int Info(cli::Args& args);
int Verify(cli::Args& args);
int Replay(cli::Args& args);
int RestoreQemu(cli::Args& args);  // restore_qemu.cc, built with the QEMU integration
int RestoreLibvirt(cli::Args& args);  // restore_libvirt.cc, built with the libvirt integration

}  // namespace halite::restore

#endif  // HALITE_TOOLS_RESTORE_MODES_H_
