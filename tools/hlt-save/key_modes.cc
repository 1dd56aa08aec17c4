// Keys of encrypted checkpoints (format-spec 13):
//   hlt-save rekey CKPT -o NEW --key-file NEW_KEY   re-seal under another key without recompressing
//   hlt-save keygen -o KEY_FILE                     a new random key (mode 0600), and its key id
//   hlt-save key-id KEY_FILE                        the key id of a key
#include <cstdio>

#include "halite/key_sources.h"
#include "halite/authentication.h"
#include "halite/checkpoint_rekey.h"
#include "common/cli_parser.h"
#include "hlt-save/save_modes.h"

namespace halite::save {
namespace {

const char* kRekeyUsage =
    "usage: hlt-save rekey CKPT -o NEW (--key-file NEW_KEY | --new-key-command CMD) [--cipher C]\n"
    "                      [--encrypt-key-file OLD_KEY] [--keyring FILE] [--key-command CMD] [--parent-dir DIR]\n"
    "                      [--input-key-file MAC_KEY] [--block-cache DIR] [--no-sync]\n"
    "Writes NEW: CKPT encrypted with NEW_KEY (format 1.5), every block, frame, blob and sealed index section\n"
    "authenticated with its old key and sealed with the new one in memory, nothing decompressed or recompressed.\n"
    "CKPT may be unencrypted (it is then encrypted as it is). NEW gets a new file id; an incremental CKPT keeps\n"
    "naming its parent, which is not rewritten (a chain may mix keys); children of CKPT keep naming CKPT.\n"
    "  --key-file NEW_KEY     the new key (64 hex digits or 32 bytes; hlt-save keygen makes one)\n"
    "  --new-key-command CMD  the new key from `sh -c CMD` (HALITE_KEY_PURPOSE=encrypt)\n"
    "  --cipher C             auto (default), aes256gcm, xchacha20poly1305\n"
    "  --input-key-file K     CKPT is authenticated (keyed BLAKE2b MAC) with this key\n"
    "CKPT's own key, and its parents': --encrypt-key-file, --keyring, --key-command, HALITE_ENCRYPT_KEY,\n"
    "HALITE_KEYRING.\n";

}  // namespace

int Rekey(cli::Args& args) {
  const std::string tool = "hlt-save rekey";
  std::string in, out, new_key_file, new_key_command, cipher, input_key_file;
  RekeyOptions options;
  bool no_sync = false;
  cli::Parser p(tool, kRekeyUsage);
  cli::ReaderFlagValues reader_flags;
  p.app().add_option("CKPT", in);
  p.app().add_option("-o,--output", out);
  p.app().add_option("--key-file", new_key_file);  // here: the new key (issue 26's spelling)
  p.app().add_option("--new-key-command", new_key_command);
  p.app().add_option("--cipher", cipher);
  p.app().add_option("--input-key-file", input_key_file);
  p.app().add_flag("--no-sync", no_sync);
  p.AddReaderFlags(&reader_flags, /*with_key_file=*/false);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (p.app().count("--cipher")) {
    auto c = ParseCipher(cipher);
    if (!c) return p.UsageError(c.error().message());
    options.cipher = *c;
  }
  if (p.app().count("--input-key-file")) {
    auto key = ReadMacKeyFile(input_key_file);
    if (!key) return p.UsageError(key.error().message());
    options.reader.mac_key = *key;
  }
  if (no_sync) options.sink.sync = false;
  if (int rc = p.CheckReaderFlags(reader_flags, &options.reader); rc >= 0) return rc;
  if (in.empty() || out.empty()) return cli::UsageError(tool, "CKPT and -o NEW are required", kRekeyUsage);
  if (new_key_file.empty() == new_key_command.empty()) {
    return cli::UsageError(tool, "the new key: give one of --key-file NEW_KEY and --new-key-command CMD", kRekeyUsage);
  }
  if (in == out) return cli::UsageError(tool, "NEW must differ from CKPT", kRekeyUsage);
  if (int rc = p.OpenReaderFlags(reader_flags, &options.reader); rc >= 0) return rc;
  auto key = new_key_file.empty() ? RunKeyCommand(new_key_command, nullptr) : ReadKeyFile(new_key_file);
  if (!key) return cli::Fail(tool, key.error());
  options.key = *key;
  ForbidCoreDumps();
  cli::Progress progress("rekeying");
  options.progress = [&](uint64_t done, uint64_t total) { progress.Update(done, total); };
  auto summary = RekeyCheckpoint(in, out, options);
  progress.Finish();
  if (!summary) return cli::Fail(tool, summary.error());
  std::fputs(RekeySummaryText(in, out, *summary).c_str(), stdout);
  return cli::kExitOk;
}

int KeyGen(cli::Args& args) {
  const std::string tool = "hlt-save keygen";
  const std::string usage =
      "usage: hlt-save keygen -o KEY_FILE\n"
      "Writes a new random key for encrypted checkpoints (64 hex digits, mode 0600; an existing file is never\n"
      "replaced) and prints its key id, the name checkpoints and keyrings know it by.\n";
  std::string out;
  cli::Parser p(tool, usage);
  p.app().add_option("-o,--output", out);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (out.empty()) return cli::UsageError(tool, "-o KEY_FILE is required", usage);
  const EncryptionKey key = GenerateKey();
  auto id = ComputeKeyId(key);
  if (!id) return cli::Fail(tool, id.error());
  if (Status written = WriteNewKeyFile(out, key); !written.ok()) return cli::Fail(tool, written);
  std::printf("%s: key id %s\n", out.c_str(), KeyIdHex(*id).c_str());
  return cli::kExitOk;
}

int KeyIdOf(cli::Args& args) {
  const std::string tool = "hlt-save key-id";
  const std::string usage = "usage: hlt-save key-id KEY_FILE\nPrints the key id of a key (format-spec 13.1).\n";
  std::string file;
  cli::Parser p(tool, usage);
  p.app().add_option("KEY_FILE", file);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (file.empty()) return cli::UsageError(tool, "KEY_FILE is required", usage);
  auto key = ReadKeyFile(file);
  if (!key) return cli::Fail(tool, key.error());
  auto id = ComputeKeyId(*key);
  if (!id) return cli::Fail(tool, id.error());
  std::printf("%s\n", KeyIdHex(*id).c_str());
  return cli::kExitOk;
}

}  // namespace halite::save
