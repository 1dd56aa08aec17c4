// hlt-save --parent P of a clone restored with --memory shared: is the file QEMU maps its RAM from the image
// server's image of P? The server says which checkpoint it serves in its .stats file (MOUNT/.stats).
#ifndef HALITE_TOOLS_PARENT_IMAGE_H_
#define HALITE_TOOLS_PARENT_IMAGE_H_

#include <functional>
#include <memory>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/status.h"

namespace halite::save {

// True when `mapped_file` (a path from /proc/PID/maps) is served by an image server whose .stats lists it as the
// image of region `region` of exactly `parent` (file id and index fingerprint). False when it is some other file;
// an error when its .stats cannot be read or parsed.
Result<bool> IsImageOfParent(const CheckpointReader& parent, const std::string& mapped_file, const std::string& region);

// For --parent: CheckpointSaveOptions::is_parent_image answering with IsImageOfParent.
std::function<Result<bool>(const std::string&, const std::string&)> ParentImageCheck(
    std::shared_ptr<const CheckpointReader> parent);

// The summary line: which file QEMU mapped and how many pages were declared unread, or why not.
void PrintParentImage(const qemu::CheckpointSaveResult& r);

}  // namespace halite::save

#endif  // HALITE_TOOLS_PARENT_IMAGE_H_
