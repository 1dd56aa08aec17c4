// What the C API's files share: the handle types they both see, and the mapping of Status to C error codes with
// the calling thread's last message.
#ifndef HALITE_CAPI_CAPI_INTERNAL_H_
#define HALITE_CAPI_CAPI_INTERNAL_H_

#include <memory>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/encryption.h"
#include "halite/halite_c.h"
#include "halite/status.h"

struct hlt_reader {
  std::unique_ptr<halite::CheckpointReader> reader;
};

// The writer and how it was made: hlt_writer_set_encryption_key makes it again with a key, before any region.
struct hlt_writer {
  std::unique_ptr<halite::CheckpointWriter> writer;
  std::string path;
  halite::WriterOptions options;
  bool regions_added = false;
};

struct hlt_keyring {
  std::shared_ptr<halite::Keyring> keyring;
};

namespace halite::capi {

// The calling thread's last failure message (hlt_last_error).
std::string& LastError();
// HLT_OK for ok; otherwise records the message and returns the HLT_E* code for the status.
int Code(const Status& s);
// Records "invalid-argument: what" and returns HLT_EINVAL.
int Invalid(const char* what);
// Opens `path` with the environment's block cache and keys, plus `keyring` (may be null) and parent directories.
int OpenReader(const char* path, const char* const* parent_dirs, size_t parent_dir_count,
               const std::shared_ptr<Keyring>& keyring, hlt_reader** out);

}  // namespace halite::capi

#endif  // HALITE_CAPI_CAPI_INTERNAL_H_
