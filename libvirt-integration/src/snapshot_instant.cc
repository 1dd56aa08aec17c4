// A libvirt domain's disks, NVRAM and TPM state at a save's instant (snapshot_instant.h).
#include "snapshot_instant.h"

namespace halite::libvirt {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace

Result<DomainSnapshotInstant> DomainSnapshotInstant::Prepare(const Domain& domain, const DomainXml& xml,
                                                             const std::vector<WritableDisk>& disks,
                                                             const std::string& tag) {
  HLT_ASSIGN_OR_RETURN(DomainStateFiles files, LocateDomainStateFiles(xml, xml.uuid()));
  HLT_ASSIGN_OR_RETURN(DiskFreeze freeze, PrepareDiskFreeze(domain, xml, disks, tag));
  return DomainSnapshotInstant(domain, std::move(freeze), std::move(files));
}

Status DomainSnapshotInstant::Capture() {
  if (captured_) return Status::Internal("the saved instant of domain " + domain_->name() + " was taken already");
  captured_ = true;
  HLT_RETURN_IF_ERROR(ReadDomainStateFiles(&files_));
  return FreezeDisks(*domain_, &freeze_);
}

Status DomainSnapshotInstant::AddToCheckpoint(CheckpointWriter& writer, LibvirtSaveResult* result) {
  if (!captured_) return Status::Internal("the saved instant of domain " + domain_->name() + " was never taken");
  HLT_ASSIGN_OR_RETURN(result->disks, FingerprintFrozenDisks(freeze_));
  result->overlays = freeze_.overlays;
  HLT_RETURN_IF_ERROR(AddDomainStateBlobs(writer, files_));
  result->nvram = files_.nvram_path;
  result->nvram_bytes = files_.nvram.size();
  result->tpm_state_dir = files_.tpm_dir;
  result->tpm_state_files.clear();
  for (const StateFile& f : files_.tpm_files) result->tpm_state_files.push_back(f.name);
  return writer.AddBlob(kDisksBlobName, Bytes(EncodeFrozenDisks(result->disks)));
}

Status DomainSnapshotInstant::Undo() { return UndoDiskFreeze(*domain_, &freeze_); }

const std::vector<uint8_t>* DomainSnapshotInstant::NvramForBlock(const std::string& block,
                                                                 uint64_t used_length) const {
  const std::string unit1 = ".flash1";
  const bool flash1 =
      block.size() > unit1.size() && block.compare(block.size() - unit1.size(), unit1.size(), unit1) == 0;
  if (!captured_ || files_.nvram_path.empty() || !flash1 || files_.nvram.size() != used_length) return nullptr;
  return &files_.nvram;
}

}  // namespace halite::libvirt
