// The per-domain state files a checkpoint of a libvirt domain carries besides its memory and disks: the UEFI
// variable store (<os><nvram>) and the TPM emulator's state (swtpm's directory, which libvirt keys by the domain's
// UUID). Both are written by the guest like a disk: they are read at the save with the guest paused, stored as
// blobs of the checkpoint, and every restore gets a copy of its own.
//
// Blobs: "libvirt.nvram" (the NVRAM file's bytes), "libvirt.tpm/NAME" (each file of swtpm's state directory, its
// lock file excepted).
#ifndef HALITE_LIBVIRT_DOMAIN_STATE_FILES_H_
#define HALITE_LIBVIRT_DOMAIN_STATE_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/libvirt/domain_xml.h"
#include "halite/status.h"

namespace halite::libvirt {

inline constexpr const char* kNvramBlobName = "libvirt.nvram";
inline constexpr const char* kTpmBlobPrefix = "libvirt.tpm/";
// Bounds a restore checks before it allocates (a checkpoint is untrusted input): OVMF's variable stores are
// 128 KiB to 4 MiB, swtpm's files a few KiB to 100 KiB.
inline constexpr uint64_t kMaxNvramBytes = 64ull << 20;
inline constexpr uint64_t kMaxTpmFileBytes = 16ull << 20;
inline constexpr size_t kMaxTpmFiles = 16;

struct StateFile {
  std::string name;
  std::vector<uint8_t> bytes;
};

struct DomainStateFiles {
  std::string nvram_path;  // where the NVRAM was read at the save ("" without one)
  std::vector<uint8_t> nvram;
  std::string tpm_version;  // "2.0", "1.2"; "" without an emulated TPM
  std::string tpm_dir;      // swtpm's state directory at the save
  std::vector<StateFile> tpm_files;
};

// Where the NVRAM file and the TPM emulator's state files of running domain `xml` (UUID `uuid`) are (nothing is
// read yet). swtpm's state directory is found on the command line of the domain's swtpm process (`--tpmstate
// dir=.../UUID/tpm2`). kNotFound when the domain has an emulated TPM whose swtpm is not running on this host.
Result<DomainStateFiles> LocateDomainStateFiles(const DomainXml& xml, const std::string& uuid);

// Reads the located files (replacing what *files held); call with the guest paused. Errors: kIoError naming a file
// that cannot be read, kInvalidArgument for a file over the bounds above.
Status ReadDomainStateFiles(DomainStateFiles* files);

// Adds the blobs to a checkpoint being written.
Status AddDomainStateBlobs(CheckpointWriter& writer, const DomainStateFiles& files);

// The state files a checkpoint carries (none from a checkpoint saved before they were). kCorrupt for a blob over
// the bounds or a TPM file name that is not a plain file name.
Result<DomainStateFiles> ReadDomainStateBlobs(const CheckpointReader& reader);

// swtpm's state directory for a domain: DIR/UUID/tpm2 (TPM 2.0) or DIR/UUID/tpm1.2, where DIR is libvirt's
// swtpm storage directory.
std::string TpmStatePath(const std::string& storage_dir, const std::string& uuid, const std::string& version);

// Writes the saved TPM state into `state_path` (created with its parents; files already there are replaced), so
// that libvirt starts swtpm on it instead of making a new TPM (libvirt runs swtpm_setup only for a directory that
// does not exist, and a privileged libvirt gives the files to its swtpm user itself). Run as root, what it makes
// goes to the owner of the nearest existing directory above the storage directory when that is not root (a session
// instance's user). kIoError naming the file.
Status InstallTpmState(const std::vector<StateFile>& files, const std::string& state_path);

// Creates `path` with `bytes` (O_EXCL: kInvalidArgument when it exists), synced. kIoError naming the file.
Status WriteNewFile(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_DOMAIN_STATE_FILES_H_
