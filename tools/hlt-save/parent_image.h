// hlt-save --parent P of a clone restored with --memory shared: is the file QEMU maps its RAM from the image
// server's image of P? The server says which checkpoint it serves in its .stats file (MOUNT/.stats).
#ifndef HALITE_TOOLS_PARENT_IMAGE_H_
#define HALITE_TOOLS_PARENT_IMAGE_H_

#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/status.h"

namespace halite::save {

// True when `mapped_file` (a path from /proc/PID/maps) is served by an image server whose .stats lists it as the
// image of region `region` of exactly `parent` (file id and index fingerprint). False when it is some other file;
// an error when its .stats cannot be read or parsed.
Result<bool> IsImageOfParent(const CheckpointReader& parent, const std::string& mapped_file, const std::string& region);

}  // namespace halite::save

#endif  // HALITE_TOOLS_PARENT_IMAGE_H_
