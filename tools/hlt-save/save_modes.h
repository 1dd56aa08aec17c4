// The modes of hlt-save, one file each.
#ifndef HALITE_TOOLS_SAVE_MODES_H_
#define HALITE_TOOLS_SAVE_MODES_H_

#include "common/cli.h"

namespace halite::save {

int SaveRaw(cli::Args& args);
int SaveXen(cli::Args& args);  // save_xen.cc, built with the Xen integration
int Relayout(cli::Args& args);
int Flatten(cli::Args& args);  // relayout.cc: a chain written as one full checkpoint
int Rekey(cli::Args& args);    // key_modes.cc: re-sealed under another key, nothing recompressed
int KeyGen(cli::Args& args);   // key_modes.cc
int KeyIdOf(cli::Args& args);  // key_modes.cc
int SaveQemu(cli::Args& args);  // save_qemu.cc, built with the QEMU integration
int SaveLibvirt(cli::Args& args);  // save_libvirt.cc, built with the libvirt integration

}  // namespace halite::save

#endif  // HALITE_TOOLS_SAVE_MODES_H_
