// The writer options every hlt-save mode accepts.
#ifndef HALITE_TOOLS_WRITER_FLAGS_H_
#define HALITE_TOOLS_WRITER_FLAGS_H_

#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cli_parser.h"
#include "halite/checkpoint_writer.h"
#include "halite/writer_setup.h"

namespace halite::save {

struct WriterFlags {
  WriterOptions options;
  std::string access_trace;  // path, or empty
  std::string va_hints;      // path, or empty
  std::string parent;        // --parent: the checkpoint this one is a child of (format-spec 12), or empty
  ReaderOptions parent_reader;  // how the parent's chain is opened (--parent-dir)
  std::string block_cache_dir;  // --block-cache: where a parent (or relayout's input) on an object store is cached
  uint64_t block_cache_size = 0;
  // Encryption (format-spec 13): the key sources; PrepareWriter turns them into options.encryption_key (the key of
  // the new checkpoint) and `keyring` (every key known: for reading a parent or an input checkpoint).
  KeySources keys;
  bool no_encryption = false;  // --no-encryption: a plain checkpoint even with HALITE_ENCRYPT_KEY set
  std::shared_ptr<Keyring> keyring;
  Status ApplyHints(CheckpointWriter& w) const { return ApplyHintFiles(access_trace, va_hints, w); }
};

inline constexpr const char* kWriterFlagsHelp =
    "writer options:\n"
    "  --block-pages N        pages per locality block (1..4096, default 64)\n"
    "  --frame-pages N|auto   store a block of more pages as independent zstd frames of N pages, so a fault\n"
    "                         decodes only its page's frame first (format 1.3; 0 = one frame a block); auto\n"
    "                         (default): 16, or 32 when a sample of blocks is 3% smaller so, or one frame\n"
    "                         a block when that is 2% smaller than the frames so chosen\n"
    "  --level L              zstd level (default 3)\n"
    "  --threads N            compression threads (default: one per CPU)\n"
    "  --rate-limit BYTES_PER_S  throttle compression to this many raw bytes a second (K/M/G suffixes)\n"
    "  --policy P             halite (default), access, va or physical\n"
    "  --dictionary M         auto (default: keep a dictionary trained on the memory when it makes a sample of\n"
    "                         blocks, its own size included, >= 1% smaller), on, off\n"
    "  --access-trace FILE    pages in the order the guest touched them during the save\n"
    "  --va-hints FILE        pages in guest-virtual-address order; a blank line between address spaces\n"
    "  --key-file K           authenticate the checkpoint with a keyed BLAKE2b MAC (key: 32 bytes or 64 hex)\n"
    "  --encrypt-key-file K   encrypt the checkpoint with key K (format 1.5: every page, the device state and what in\n"
    "                         the index reveals content; 64 hex digits or 32 bytes, e.g. from hlt-save keygen)\n"
    "  --key-command CMD      encrypt with the key `sh -c CMD` prints (HALITE_KEY_PURPOSE=encrypt, HALITE_KEY_ID\n"
    "                         empty); also asked, with HALITE_KEY_ID set, for a parent's key no other source gives\n"
    "  --keyring FILE         keys by id (\"KEY_ID KEY\" lines) for reading a parent or input encrypted with others\n"
    "  --cipher C             auto (AES-256-GCM on a CPU with AES-NI, else XChaCha20-Poly1305), aes256gcm,\n"
    "                         xchacha20poly1305; every reader reads both on any CPU\n"
    "  --no-encryption        do not encrypt, even with HALITE_ENCRYPT_KEY (a key, which otherwise encrypts) set\n"
    "  --parent P             incremental: pages equal (byte for byte) to checkpoint P's are stored as references to\n"
    "                         P, which must stay reachable: its path relative to CKPT is recorded (see --parent-dir)\n"
    "  --parent-dir DIR       where P's own parents are looked for if they moved (repeatable)\n"
    "  --block-cache DIR      blocks of P (or of relayout's input) read from s3:// or rados:// go through this host\n"
    "                         block cache (default: $HALITE_BLOCK_CACHE); --block-cache-size B bounds it (8G)\n"
    "  --rewrite-fraction F   with --parent: a block of the layout in which at least this fraction of the pages\n"
    "                         changed is stored whole (its unchanged pages again too), so that restoring the chain\n"
    "                         reads it once (default 0.25; above 1: every equal page stays a reference)\n"
    "  --parent-coding M      with --parent: based (default: changed pages whose parent version a restore of the\n"
    "                         chain reads anyway are coded against it, when a trial shows it pays; format 1.4)\n"
    "                         or plain (each changed page coded on its own)\n"
    "  --page-hashes          store a hash per page (8 bytes a page, 0.2%) so that children of this checkpoint rule\n"
    "                         out changed pages without decoding it; on by default with --parent\n"
    "  --no-sync              skip fsync (tests and benchmarks only)\n"
    "hint files: one entry a line, `PAGE` or `PAGE COUNT` (COUNT consecutive pages), `REGION:PAGE` for a page of\n"
    "another region than `ram`; numbers decimal or 0x-hex; `#` starts a comment. See format-spec/hint-files.md.\n";

// The writer options as given (those that need checking), before ApplyWriterFlags.
struct WriterFlagText {
  std::string block_pages, frame_pages, parent_coding, level, threads, rate_limit, policy, dictionary, key_file,
      cipher, block_cache_size, rewrite_fraction;
  bool no_sync = false;
};
// Adds every writer option to `app`: plain values straight into *flags, the others into *text.
void AddWriterFlags(CLI::App& app, WriterFlagText* text, WriterFlags* flags);
// After parsing: checks and converts *text into *flags; returns the usage error, empty when fine.
std::string ApplyWriterFlags(const CLI::App& app, const WriterFlagText& text, WriterFlags* flags);

// After parsing, before CheckpointWriter::Create: the keys (ChooseEncryptionKey, halite/writer_setup.h), then, with
// --parent, the block cache and the parent's chain (OpenWriterParent). `out` is the checkpoint being written.
Status PrepareWriter(WriterFlags* flags, const std::string& out);

}  // namespace halite::save

#endif  // HALITE_TOOLS_WRITER_FLAGS_H_
