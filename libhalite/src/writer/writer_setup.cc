#include "halite/writer_setup.h"

#include <cstdlib>
#include <filesystem>

#include "halite/hint_files.h"

namespace halite {

Result<std::shared_ptr<Keyring>> ChooseEncryptionKey(const KeySources& keys, bool no_encryption,
                                                     WriterOptions* options) {
  HLT_ASSIGN_OR_RETURN(std::shared_ptr<Keyring> keyring, OpenKeyring(keys));
  if (no_encryption) {
    if (keys.key_files.empty() && keys.key_command.empty()) return keyring;
    return Status::InvalidArgument("--no-encryption with --encrypt-key-file or --key-command: which one?");
  }
  if (keys.key_files.size() > 1) {
    return Status::InvalidArgument("--encrypt-key-file given " + std::to_string(keys.key_files.size()) +
                                   " times: the new checkpoint has one key (put the keys of parents in a --keyring)");
  }
  std::optional<EncryptionKey> key;
  if (!keys.key_files.empty()) {
    HLT_ASSIGN_OR_RETURN(key, ReadKeyFile(keys.key_files.front()));
  } else if (!keys.key_command.empty()) {
    HLT_ASSIGN_OR_RETURN(key, RunKeyCommand(keys.key_command, nullptr));
    HLT_RETURN_IF_ERROR(keyring->Add(*key));
  } else if (const char* env = std::getenv("HALITE_ENCRYPT_KEY"); env && *env) {
    HLT_ASSIGN_OR_RETURN(key, ParseKey(env, "HALITE_ENCRYPT_KEY"));
  }
  options->encryption_key = key;
  return keyring;
}

Status OpenWriterParent(const std::string& parent, const std::string& out, const ReaderOptions& reader,
                        WriterOptions* options) {
  std::error_code ec;
  if (parent == out || std::filesystem::equivalent(parent, out, ec)) {
    return Status::InvalidArgument(out + ": the output cannot be its own parent");
  }
  HLT_ASSIGN_OR_RETURN(auto opened, CheckpointReader::Open(parent, reader));
  options->parent = std::shared_ptr<const CheckpointReader>(std::move(opened));
  options->page_hashes = true;
  return Status::Ok();
}

Status ApplyHintFiles(const std::string& access_trace, const std::string& va_hints, CheckpointWriter& writer) {
  if (!access_trace.empty()) {
    HLT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(access_trace));
    HLT_ASSIGN_OR_RETURN(auto runs, ParseAccessTrace(text, access_trace, writer.regions()));
    HLT_RETURN_IF_ERROR(writer.AddAccessedPages(runs));
  }
  if (!va_hints.empty()) {
    HLT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(va_hints));
    HLT_ASSIGN_OR_RETURN(auto runs, ParseVaHints(text, va_hints, writer.regions()));
    HLT_RETURN_IF_ERROR(writer.AddVaRuns(runs));
  }
  return Status::Ok();
}

}  // namespace halite
