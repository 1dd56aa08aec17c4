// What a save of a libvirt domain takes at its saved instant besides QEMU's own state
// (qemu::CheckpointSaveOptions::at_snapshot_instant): the domain's NVRAM and TPM state files read and its writable
// disks frozen, with the guest paused. What the pause needs is made before it (the overlays the domain goes on to,
// where swtpm keeps its state), the frozen images' fingerprints are taken after it, and all of it is undone when the
// save fails afterwards. Borrows the Domain for its lifetime; not thread-safe.
#ifndef HALITE_LIBVIRT_SNAPSHOT_INSTANT_H_
#define HALITE_LIBVIRT_SNAPSHOT_INSTANT_H_

#include <string>
#include <vector>

#include "domain_state_files.h"
#include "frozen_disks.h"
#include "halite/checkpoint_writer.h"
#include "halite/libvirt/libvirt_checkpoint.h"

namespace halite::libvirt {

class DomainSnapshotInstant {
 public:
  // Before the guest is paused. Errors: those of PrepareDiskFreeze and LocateDomainStateFiles (nothing left).
  static Result<DomainSnapshotInstant> Prepare(const Domain& domain, const DomainXml& xml,
                                               const std::vector<WritableDisk>& disks, const std::string& tag);

  // With the guest paused: the state files read, then the disks frozen (last: a failure before it leaves the
  // domain as it was). Called once.
  Status Capture();

  // After the stream (the guest may run): the frozen images fingerprinted; the NVRAM, the TPM state and the frozen
  // disk records added to the checkpoint and reported in *result.
  Status AddToCheckpoint(CheckpointWriter& writer, LibvirtSaveResult* result);

  // The save failed: the domain goes back onto its disk images, the overlays are gone (UndoDiskFreeze). Errors
  // name what is left.
  Status Undo();

  // For qemu::CheckpointSaveOptions::block_content_at_instant: the NVRAM as read at the instant for the RAMBlock
  // of QEMU's pflash that holds it (unit 1, "system.flash1" on a pc machine, of the NVRAM's size), else null.
  // QEMU writes a pflash through to its file at every guest write, so the file read in the pause is the flash as
  // of the instant; a restored QEMU writes its flash back to its own NVRAM file when it starts.
  const std::vector<uint8_t>* NvramForBlock(const std::string& block, uint64_t used_length) const;

 private:
  DomainSnapshotInstant(const Domain& domain, DiskFreeze freeze, DomainStateFiles files)
      : domain_(&domain), freeze_(std::move(freeze)), files_(std::move(files)) {}

  const Domain* domain_;
  DiskFreeze freeze_;
  DomainStateFiles files_;
  bool captured_ = false;
};

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_SNAPSHOT_INSTANT_H_
