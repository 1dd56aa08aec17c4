// Saving a clone restored with --memory shared against its parent P (hlt-save --parent P): is the file QEMU maps
// its RAM from the image server's image of P? The server says which checkpoint it serves in its .stats file
// (MOUNT/.stats).
#ifndef HALITE_QEMU_QEMU_PARENT_IMAGE_H_
#define HALITE_QEMU_QEMU_PARENT_IMAGE_H_

#include <functional>
#include <memory>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/status.h"

namespace halite::qemu {

// True when `mapped_file` (a path from /proc/PID/maps) is served by an image server whose .stats lists it as the
// image of region `region` of exactly `parent` (file id and index fingerprint). False when it is some other file;
// an error when its .stats cannot be read or parsed.
Result<bool> IsImageOfParent(const CheckpointReader& parent, const std::string& mapped_file, const std::string& region);
// For a save with a parent: CheckpointSaveOptions::is_parent_image answering with IsImageOfParent.
std::function<Result<bool>(const std::string&, const std::string&)> ParentImageCheck(
    std::shared_ptr<const CheckpointReader> parent);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_PARENT_IMAGE_H_
