// Freezing a domain's writable disks at a save (and undoing it when the save fails), and checking them at a
// restore (libvirt_checkpoint.h).
#ifndef HALITE_LIBVIRT_FROZEN_DISKS_H_
#define HALITE_LIBVIRT_FROZEN_DISKS_H_

#include <string>
#include <vector>

#include "halite/libvirt/domain_xml.h"
#include "halite/libvirt/libvirt_checkpoint.h"
#include "halite/libvirt/libvirt_connection.h"

namespace halite::libvirt {

// Size and XXH3-128 of an image file's bytes. kIoError naming the file.
Status Fingerprint(const std::string& path, uint64_t* size, std::string* xxh3_128_hex);

// The new images a save moves a domain's writable disks onto: made before the guest is paused, so that the pause
// holds only libvirt's switch onto them.
struct DiskFreeze {
  std::vector<WritableDisk> disks;
  std::vector<std::string> overlays;  // one per disk: "<image>.<tag>.qcow2", an empty qcow2 backed by the image
  std::string snapshot_xml;           // the disk-only snapshot that moves the domain onto them
  bool frozen = false;                // the snapshot was taken: the domain writes to the overlays now
};

// Before the guest is paused: creates each disk's overlay (`qemu-img create -f qcow2 -u -b IMAGE -F FORMAT OVERLAY
// SIZE`, the image's virtual size as libvirt reports it, owner and mode those of the image, whose user QEMU runs
// as). kInvalidArgument when an overlay exists already; errors of qemu-img and libvirt. Nothing is left on error.
Result<DiskFreeze> PrepareDiskFreeze(const Domain& domain, const DomainXml& xml, const std::vector<WritableDisk>& disks,
                                     const std::string& tag);

// With the guest paused: one atomic external disk-only snapshot onto the prepared overlays (libvirt keeps no
// snapshot metadata; other disks, cdroms and read-only ones, are left out). Each image is frozen as it is and the
// domain goes on on its overlay. On error nothing changed (libvirt's atomic snapshot).
Status FreezeDisks(const Domain& domain, DiskFreeze* freeze);

// After FreezeDisks: each frozen image's path, format, size and XXH3-128 (read while the domain runs on).
Result<std::vector<FrozenDisk>> FingerprintFrozenDisks(const DiskFreeze& freeze);

// Undoes PrepareDiskFreeze and FreezeDisks when the save fails: a domain moved onto its overlays goes back onto its
// images (each overlay is committed into its image by an active block commit, which the guest's writes since the
// freeze reach too, then libvirt pivots and deletes it), and overlays never used are removed. Each step is tried for
// every disk; kIoError naming what is left otherwise.
Status UndoDiskFreeze(const Domain& domain, DiskFreeze* freeze, int timeout_ms = 120000);

std::string EncodeFrozenDisks(const std::vector<FrozenDisk>& disks);
Result<std::vector<FrozenDisk>> DecodeFrozenDisks(const std::string& json, const std::string& what);

// `qemu-img create -f qcow2 -b BASE -F FORMAT OVERLAY` (the overlay must not exist).
Status CreateOverlay(const std::string& base, const std::string& format, const std::string& overlay);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_FROZEN_DISKS_H_
