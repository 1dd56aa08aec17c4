// hlt-make-vectors DIR: regenerates format-spec/test-vectors/ (files, expected descriptions, README table).
#include <fstream>
#include <iostream>

#include "vectors/encrypted_vectors.h"
#include "vectors/hint_vectors.h"
#include "vectors/vector_builder.h"

namespace {
bool WriteFile(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(n));
  return bool(f);
}
std::string KeyFileText(const halite::EncryptionKey& key) { return halite::KeyHex(key) + "\n"; }

bool WriteEncrypted(const std::string& dir) {
  using namespace halite;
  const auto a = vectors::VectorKeyA(), b = vectors::VectorKeyB();
  const std::string ka = KeyFileText(a), kb = KeyFileText(b);
  const std::string ring = "# key id, key (format-spec 13.1): the keys of the encrypted test vectors\n" +
                           KeyIdHex(*ComputeKeyId(a)) + " " + KeyHex(a) + "\n" + KeyIdHex(*ComputeKeyId(b)) + " " +
                           KeyHex(b) + "\n";
  if (!WriteFile(dir + "/key-a.key", ka.data(), ka.size()) || !WriteFile(dir + "/key-b.key", kb.data(), kb.size()) ||
      !WriteFile(dir + "/keyring", ring.data(), ring.size())) {
    return false;
  }
  auto built = vectors::BuildEncryptedVectors();
  if (!built) {
    std::cerr << built.error().ToString() << "\n";
    return false;
  }
  std::string table = "| file | keys | expected result | message contains | what it is |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& v : *built) {
    if (!WriteFile(dir + "/" + v.name, v.bytes.data(), v.bytes.size())) return false;
  }
  for (const auto& v : *built) {
    std::string result = "valid";
    if (v.valid) {
      auto r = CheckpointReader::Open(dir + "/" + v.name, vectors::VectorKeys(v.keys));
      if (!r) {
        std::cerr << r.error().ToString() << "\n";
        return false;
      }
      auto d = vectors::Describe(**r);
      if (!d || !WriteFile(dir + "/" + v.name + ".expected.txt", d->data(), d->size())) return false;
    } else {
      result = v.open_code != StatusCode::kOk ? std::string("open fails: ") + StatusCodeName(v.open_code)
                                              : std::string("opens; verify fails: ") + StatusCodeName(v.verify_code);
    }
    table += "| encrypted/" + v.name + " | " + (v.keys.empty() ? "none" : v.keys) + " | " + result + " | " +
             (v.message.empty() ? "" : "`" + v.message + "`") + " | " + v.why + " |\n";
  }
  for (const auto& c : vectors::EncryptedKeyCases()) {
    std::string result = c.open_code == StatusCode::kOk ? "opens" : std::string("open fails: ") + StatusCodeName(c.open_code);
    table += "| encrypted/" + c.file + " | " + (c.keys.empty() ? "none" : c.keys) +
             (c.without_key ? ", open_without_key" : "") + " | " + result + " | " +
             (c.message.empty() ? "" : "`" + c.message + "`") + " | " + c.why + " |\n";
  }
  std::cout << "encrypted vectors (paste into README.md):\n" << table;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace halite;
  if (argc != 2) {
    std::cerr << "usage: hlt-make-vectors DIR\n";
    return 2;
  }
  std::string dir = argv[1];
  auto valid = vectors::BuildValidVectors();
  if (!valid) {
    std::cerr << valid.error().ToString() << "\n";
    return 1;
  }
  for (const auto& v : *valid) {
    if (!WriteFile(dir + "/valid/" + v.name, v.bytes.data(), v.bytes.size())) return 3;
    auto r = CheckpointReader::Open(NewMemoryFile(v.name, v.bytes));
    if (!r) {
      std::cerr << r.error().ToString() << "\n";
      return 1;
    }
    auto d = vectors::Describe(**r);
    if (!d) return 1;
    if (!WriteFile(dir + "/valid/" + v.name + ".expected.txt", d->data(), d->size())) return 3;
  }
  auto invalid = vectors::BuildInvalidVectors(*valid);
  if (!invalid) return 1;
  std::string table = "| file | expected result | message contains | what is wrong |\n| --- | --- | --- | --- |\n";
  for (const auto& v : *invalid) {
    if (!WriteFile(dir + "/invalid/" + v.name, v.bytes.data(), v.bytes.size())) return 3;
    std::string result = v.open_code != StatusCode::kOk
                             ? std::string("open fails: ") + StatusCodeName(v.open_code)
                             : std::string("opens; verify fails: ") + StatusCodeName(v.verify_code);
    table += "| invalid/" + v.name + " | " + result + " | `" + v.message + "` | " + v.why + " |\n";
  }
  std::cout << "invalid vectors (paste into README.md):\n" << table;
  auto chains = vectors::BuildChainVectors();
  if (!chains) {
    std::cerr << chains.error().ToString() << "\n";
    return 1;
  }
  std::string chain_table = "| file | expected result | message contains | what it is |\n| --- | --- | --- | --- |\n";
  for (const auto& v : *chains) {
    const std::string path = dir + "/chains/" + v.name;
    if (!WriteFile(path, v.bytes.data(), v.bytes.size())) return 3;
  }
  for (const auto& v : *chains) {
    const std::string path = dir + "/chains/" + v.name;
    std::string result = "valid";
    if (v.valid && v.top) {
      auto r = CheckpointReader::Open(path);
      if (!r) {
        std::cerr << r.error().ToString() << "\n";
        return 1;
      }
      auto d = vectors::Describe(**r);
      if (!d) return 1;
      if (!WriteFile(path + ".expected.txt", d->data(), d->size())) return 3;
    } else if (!v.valid) {
      result = v.open_code != StatusCode::kOk ? std::string("open fails: ") + StatusCodeName(v.open_code)
                                              : std::string("opens; verify fails: ") + StatusCodeName(v.verify_code);
    }
    if (v.name.rfind("deep-", 0) == 0 && v.name != "deep-16.hlt" && v.name != "deep-17.hlt") continue;
    chain_table += "| chains/" + v.name + " | " + result + " | " + (v.message.empty() ? "" : "`" + v.message + "`") +
                   " | " + v.why + " |\n";
  }
  std::cout << "chain vectors (paste into README.md):\n" << chain_table;
  std::cout << "wrote " << valid->size() << " valid, " << invalid->size() << " invalid and " << chains->size()
            << " chain vectors to " << dir << "\n";

  // Encrypted checkpoints (format-spec 13): encrypted/ with the keys and a keyring, .expected.txt for valid files.
  if (!WriteEncrypted(dir + "/encrypted")) return 1;

  // Hint files (format-spec/hint-files.md): hints/valid/ with .expected.txt, hints/invalid/.
  std::string hint_table = "| file | expected | what it exercises |\n| --- | --- | --- |\n";
  size_t hints = 0;
  for (const auto& h : vectors::BuildHintVectors()) {
    const std::string path = dir + "/hints/" + h.name;
    if (!WriteFile(path, h.text.data(), h.text.size())) return 3;
    const std::string base = h.name.substr(h.name.rfind('/') + 1);
    if (h.valid) {
      const std::string d = vectors::DescribeHints(h.kind, h.text, base);
      if (!WriteFile(path + ".expected.txt", d.data(), d.size())) return 3;
    }
    hint_table += "| " + h.name + " | " + (h.valid ? std::string("parses to its .expected.txt") : "error contains `" + h.message + "`") +
                  " | " + h.why + " |\n";
    ++hints;
  }
  std::cout << "hint vectors (paste into README.md):\n" << hint_table;
  std::cout << "wrote " << hints << " hint vectors to " << dir << "/hints\n";
  return 0;
}
