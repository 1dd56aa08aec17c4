// What the C API's files share: the handle types they all see, and the mapping of Status to C error codes with
// the calling thread's last message.
#ifndef HALITE_CAPI_CAPI_INTERNAL_H_
#define HALITE_CAPI_CAPI_INTERNAL_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "halite/checkpoint_info.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/encryption.h"
#include "halite/halite_c.h"
#include "halite/key_sources.h"
#include "halite/status.h"

struct hlt_reader {
  std::unique_ptr<halite::CheckpointReader> reader;
  // hlt_reader_get_info's page counts: one pass over the page map, at the first call that needs them.
  mutable std::once_flag counted;
  mutable halite::CheckpointCounts counts;
};

// The writer's options until the first region; the CheckpointWriter is made then (capi::MakeWriter), so that
// every option may be set in any order before.
struct hlt_writer {
  std::string path;
  halite::WriterOptions options;
  bool encryption_from_environment = true;  // HALITE_ENCRYPT_KEY, unless a key is set or encryption is off
  bool encryption_off = false;
  std::string parent;  // an incremental checkpoint of this one
  std::vector<std::string> parent_dirs;
  std::shared_ptr<halite::Keyring> keyring;  // for the parent's chain
  std::string access_trace, va_hints;        // hint files applied at commit
  std::unique_ptr<halite::CheckpointWriter> writer;
  std::optional<halite::WriteSummary> summary;  // after a successful commit
  bool commit_tried = false;
};

struct hlt_keyring {
  std::shared_ptr<halite::Keyring> keyring;
};

struct hlt_open_options {
  halite::ReaderOptions reader;  // parent_dirs, mac_key, open_without_key, max_chain_depth
  std::string block_cache_dir;
  uint64_t block_cache_size = 0;
  bool environment = true;
  std::shared_ptr<halite::Keyring> file_keys = std::make_shared<halite::Keyring>();  // key and keyring files
  std::shared_ptr<halite::Keyring> caller_keys;                                      // hlt_open_options_set_keyring
  halite::KeySources file_sources;  // the key and keyring files' paths: what a server process is given (ServerFlags)
};

namespace halite::capi {

// The calling thread's last failure message (hlt_last_error).
std::string& LastError();
// HLT_OK for ok; otherwise records the message and returns the HLT_E* code for the status.
int Code(const Status& s);
// Records "invalid-argument: what" and returns HLT_EINVAL.
int Invalid(const char* what);
// The reader options `o` stands for, as hlt_reader_open_with opens with them (block cache, keys, environment).
Status MakeReaderOptions(const hlt_open_options& o, ReaderOptions* options);
// The flags that give a server process of ours (halite-image-server, for shared memory) what `o` gives this one: the
// block cache `options` opened and the key and keyring files (the environment is inherited). Keys given in memory
// (hlt_open_options_set_keyring) cannot reach another process: kInvalidArgument saying so.
Result<std::vector<std::string>> ServerFlags(const hlt_open_options& o, const ReaderOptions& options);
// Opens `path` as hlt_reader_open_with does.
int OpenReader(const char* path, const hlt_open_options& options, hlt_reader** out);
// The keyring that looks in each of `rings` (null ones skipped) in order; null when all are null.
std::shared_ptr<Keyring> Chain(std::vector<std::shared_ptr<Keyring>> rings);
// The writer's CheckpointWriter, made from its options at the first call.
Status MakeWriter(hlt_writer& w);
// The options MakeWriter makes it with (the environment's key, the parent opened), for a writer given no content
// yet: what a save that makes its own CheckpointWriter (hlt_qemu_save_create) writes with.
Result<WriterOptions> PrepareWriterOptions(hlt_writer& w);
// The hint files set (HLT_WRITER_ACCESS_TRACE, HLT_WRITER_VA_HINTS), given to `writer` before it finishes.
Status ApplyHintFiles(const hlt_writer& w, CheckpointWriter& writer);

}  // namespace halite::capi

#endif  // HALITE_CAPI_CAPI_INTERNAL_H_
