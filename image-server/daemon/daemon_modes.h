// The modes of halite-image-server, each a flag parser over the image server library's serve loops.
#ifndef HALITE_IMAGE_SERVER_DAEMON_MODES_H_
#define HALITE_IMAGE_SERVER_DAEMON_MODES_H_

#include "common/cli.h"

namespace halite::image_server {

int Serve(cli::Args& args);        // serve_checkpoints.cc: checkpoints as image files (FuseImageServer)
int ServeRamDir(cli::Args& args);  // serve_ram_dir.cc: libvirt's memory backing directory (RamDirServer)

}  // namespace halite::image_server

#endif  // HALITE_IMAGE_SERVER_DAEMON_MODES_H_
