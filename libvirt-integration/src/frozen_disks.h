// Freezing a domain's writable disks at a save, and checking them at a restore (libvirt_checkpoint.h).
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

// With the guest paused: an external disk-only snapshot (no libvirt metadata) of every disk in `disks`: each
// image is frozen as it is and the domain continues on a new qcow2 overlay beside it ("<image>.<tag>.qcow2").
// Fills *frozen (fingerprinted) and *overlays. Other disks (cdroms, read-only) are left out of the snapshot.
Status FreezeDisks(const Domain& domain, const DomainXml& xml, const std::vector<WritableDisk>& disks,
                   const std::string& tag, std::vector<FrozenDisk>* frozen, std::vector<std::string>* overlays);

std::string EncodeFrozenDisks(const std::vector<FrozenDisk>& disks);
Result<std::vector<FrozenDisk>> DecodeFrozenDisks(const std::string& json, const std::string& what);

// `qemu-img create -f qcow2 -b BASE -F FORMAT OVERLAY` (the overlay must not exist).
Status CreateOverlay(const std::string& base, const std::string& format, const std::string& overlay);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_FROZEN_DISKS_H_
