// OpenKeyring, RunKeyCommand, CheckKeyAvailable, KeySourceFlags (moved here from tools/common/key_sources.cc).
#include "halite/key_sources.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <vector>

#include "halite/checkpoint_reader.h"

namespace halite {

void ForbidCoreDumps() { (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

Result<std::shared_ptr<Keyring>> OpenKeyring(const KeySources& sources) {
  HLT_ASSIGN_OR_RETURN(std::shared_ptr<Keyring> ring, Keyring::FromEnvironment());
  if (!ring && !sources.any_flag()) return ring;
  if (!ring) ring = std::make_shared<Keyring>();
  for (const std::string& path : sources.key_files) {
    HLT_ASSIGN_OR_RETURN(EncryptionKey key, ReadKeyFile(path));
    HLT_RETURN_IF_ERROR(ring->Add(key));
  }
  for (const std::string& path : sources.keyrings) HLT_RETURN_IF_ERROR(ring->AddFile(path));
  if (!sources.key_command.empty()) {
    const std::string command = sources.key_command;
    ring->SetFetch([command](const KeyId& id) { return RunKeyCommand(command, &id); });
  }
  ForbidCoreDumps();
  return ring;
}

Result<EncryptionKey> RunKeyCommand(const std::string& command, const KeyId* id) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status::IoError("--key-command: pipe", errno);
  // Built before the fork: the child only calls async-signal-safe functions.
  const std::string id_env = "HALITE_KEY_ID=" + (id ? KeyIdHex(*id) : std::string());
  const std::string purpose_env = std::string("HALITE_KEY_PURPOSE=") + (id ? "decrypt" : "encrypt");
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("HALITE_KEY_ID=", 0) == 0 || entry.rfind("HALITE_KEY_PURPOSE=", 0) == 0) continue;
    envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(id_env.c_str()));
  envp.push_back(const_cast<char*>(purpose_env.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    return Status::IoError("--key-command: fork", errno);
  }
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    execle("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr), envp.data());
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[512];
  for (;;) {
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < 4096) text.append(buf, size_t(n));  // a key is 64 digits: more is not a key
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string what = "--key-command \"" + command + "\"" + (id ? " for key id " + KeyIdHex(*id) : "");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fill(text.begin(), text.end(), '\0');
    const std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                              : "was killed by signal " + std::to_string(WTERMSIG(status));
    return Status::IoError(what + ": " + how);
  }
  auto key = ParseKey(text, what + ": its output");
  std::fill(text.begin(), text.end(), '\0');
  return key;
}

Status CheckKeyAvailable(const std::string& checkpoint, const std::shared_ptr<Keyring>& keyring) {
  auto id = ReadCheckpointKeyId(checkpoint);
  if (!id || !id->has_value()) return Status::Ok();  // errors: opening it reports them as they are
  if (keyring) {
    auto key = keyring->Find(**id);
    if (key) return Status::Ok();
    if (key.error().code() != StatusCode::kNotFound) {
      return Status::AuthFailed(checkpoint + ": encrypted with key id " + KeyIdHex(**id) + ": " + key.error().message());
    }
  }
  return Status::AuthFailed(checkpoint + ": encrypted with key id " + KeyIdHex(**id) +
                            ", and no key with that id was given (a key file, a keyring, HALITE_ENCRYPT_KEY or a "
                            "key command)");
}

std::vector<std::string> KeySourceFlags(const KeySources& sources) {
  std::vector<std::string> out;
  auto absolute = [](const std::string& p) {
    std::error_code ec;
    const std::filesystem::path a = std::filesystem::absolute(p, ec);
    return ec ? p : a.string();
  };
  for (const auto& f : sources.key_files) out.insert(out.end(), {"--encrypt-key-file", absolute(f)});
  for (const auto& f : sources.keyrings) out.insert(out.end(), {"--keyring", absolute(f)});
  if (!sources.key_command.empty()) out.insert(out.end(), {"--key-command", sources.key_command});
  return out;
}

}  // namespace halite
