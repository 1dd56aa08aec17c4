// What a writer of checkpoints does between reading its settings and CheckpointWriter::Create, and before Finish:
// choose the key of the new checkpoint, open its parent, give the writer the hint files. hlt-save does it after its
// flags and the C API's writer after its setters (moved here from tools/hlt-save so that they do it the same way,
// with the same errors, as any other embedder).
#ifndef HALITE_WRITER_SETUP_H_
#define HALITE_WRITER_SETUP_H_

#include <memory>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/encryption.h"
#include "halite/export.h"
#include "halite/key_sources.h"
#include "halite/status.h"

namespace halite {

// The key the new checkpoint is encrypted with (format-spec 13), into options->encryption_key: the one key file of
// `keys`, else the key command's answer (added to the keyring), else HALITE_ENCRYPT_KEY; none with `no_encryption`.
// Returns the keyring of every key known (OpenKeyring: for reading a parent or an input checkpoint; null when there
// is none). Errors: unreadable keys, more than one key file, `no_encryption` with a key file or key command.
HALITE_EXPORT Result<std::shared_ptr<Keyring>> ChooseEncryptionKey(const KeySources& keys, bool no_encryption,
                                                                   WriterOptions* options);

// An incremental checkpoint (format-spec 12): opens the chain of `parent` with `reader` (parent directories, block
// cache, keyring; checked as a restorer checks it) into options->parent and turns PAGE_HASHES on, so that the
// child's own children compare cheaply. `out` is the checkpoint being written: kInvalidArgument when it is the
// parent itself. Other errors: those of CheckpointReader::Open.
HALITE_EXPORT Status OpenWriterParent(const std::string& parent, const std::string& out, const ReaderOptions& reader,
                                      WriterOptions* options);

// Reads the hint files (format-spec/hint-files.md; an empty path: none) and gives them to `writer`: the access trace
// (AddAccessedPages) and the guest-virtual-address hints (AddVaRuns). Errors name the file and line.
HALITE_EXPORT Status ApplyHintFiles(const std::string& access_trace, const std::string& va_hints,
                                    CheckpointWriter& writer);

}  // namespace halite

#endif  // HALITE_WRITER_SETUP_H_
