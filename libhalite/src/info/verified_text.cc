// VerifiedText (moved here from tools/hlt-restore/verify.cc, unchanged).
#include <string>

#include "halite/checkpoint_info.h"
#include "halite/encryption.h"

namespace halite {

std::string VerifiedText(const std::string& ckpt, const CheckpointReader& r, bool mac_verified) {
  const std::string blocks = std::to_string(r.blocks().size()), blobs = std::to_string(r.blobs().size());
  if (r.sealed()) {
    // Format-spec 13.7: storage scrubbing without the tenant's key.
    return ckpt + ": OK without the key (" + blocks + " blocks and " + blobs +
           " blobs match their checksums, the structure is sound; encrypted with key id " + KeyIdHex(r.key_id()) +
           ": contents not checked)\n";
  }
  return ckpt + ": OK (" + blocks + " blocks, " + blobs + " blobs, " + std::to_string(r.total_pages()) + " pages, " +
         std::to_string(r.file_size()) + " bytes" +
         (r.chain().size() > 1 ? ", chain of " + std::to_string(r.chain().size()) + " files" : "") +
         (mac_verified ? ", MAC verified" : "") +
         (r.encrypted() ? ", every tag verified (encrypted with key id " + KeyIdHex(r.key_id()) + ")" : "") + ")\n";
}

}  // namespace halite
