// WriteNewKeyFile (moved here from tools/hlt-save/key_modes.cc, unchanged).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "halite/encryption.h"

namespace halite {

Status WriteNewKeyFile(const std::string& path, const EncryptionKey& key) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(path + ": cannot create it (an existing key is never replaced)", errno);
  const std::string text = KeyHex(key) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    return Status::IoError(path + ": cannot write the key", e);
  }
  return Status::Ok();
}

}  // namespace halite
