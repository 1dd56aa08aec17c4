#include <cerrno>
#include <fstream>
#include <sstream>

#include "halite/authentication.h"

namespace halite {

Result<MacKey> ReadMacKeyFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IoError(path + ": cannot open key file", errno);
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  MacKey key;
  if (s.size() == 32) {
    std::copy(s.begin(), s.end(), key.begin());
    return key;
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.size() != 64) {
    return Status::InvalidArgument(path + ": a key file holds 32 bytes or 64 hexadecimal digits (found " +
                                   std::to_string(ss.str().size()) + " bytes)");
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument(path + ": not a hexadecimal key");
    key[i] = uint8_t(hi * 16 + lo);
  }
  return key;
}

}  // namespace halite
