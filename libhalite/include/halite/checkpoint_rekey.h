// Rekeying (format-spec 13, section 10): a checkpoint written again under another key without decompressing or
// recompressing anything. Every block (frame by frame), blob and sealed index section is authenticated and
// decrypted with the old key (or, for an unencrypted checkpoint, verified by its checksums and MAC) and sealed
// with the new one, in memory only; the layout, the page map and the restore order stay as they were.
//
// The result is a new file: a new random file_id (so no nonce is ever reused under any key), hence a new index
// fingerprint. A rekeyed incremental child still names its parent (unchanged, under its own key: a chain may mix
// keys). Children of a file rekeyed keep naming the old file, which they need: to move a whole chain to a new key,
// flatten it (hlt-save flatten ... --encrypt-key-file), which recompresses, or rekey only its newest files.
#ifndef HALITE_CHECKPOINT_REKEY_H_
#define HALITE_CHECKPOINT_REKEY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/encryption.h"
#include "halite/export.h"
#include "halite/status.h"
#include "halite/storage.h"

namespace halite {

struct HALITE_EXPORT RekeyOptions {
  ReaderOptions reader;  // how the input is opened: its key (reader.keyring), its parents' directories, a MAC key
  EncryptionKey key{};   // the new key
  Cipher cipher = Cipher::kAuto;
  FileSinkOptions sink;
  std::function<void(uint64_t blocks_done, uint64_t blocks_total)> progress;  // called from the calling thread
};

struct HALITE_EXPORT RekeySummary {
  uint64_t blocks = 0, blobs = 0;
  uint64_t file_bytes = 0;
  FileId file_id{};
  KeyId key_id{};
  Cipher cipher = Cipher::kAuto;
  double seconds = 0;
};

// Writes `output` (a path, s3:// or rados://; nothing is left there on failure) from `input`. The input is opened
// as a restorer opens it (its chain too). Errors: those of opening and reading the input (kAuthFailed for a
// missing key or a tag that fails), kInvalidArgument for output == input or a parent path hint that cannot be
// expressed from the output's directory, kIoError writing.
HALITE_EXPORT Result<RekeySummary> RekeyCheckpoint(const std::string& input, const std::string& output,
                                                   const RekeyOptions& options);
// "rekeyed INPUT -> OUTPUT", the blocks, blobs, bytes and time, and the cipher and key id: what hlt-save rekey prints.
HALITE_EXPORT std::string RekeySummaryText(const std::string& input, const std::string& output,
                                           const RekeySummary& summary);

}  // namespace halite

#endif  // HALITE_CHECKPOINT_REKEY_H_
