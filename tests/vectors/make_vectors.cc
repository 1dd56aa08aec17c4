// hlt-make-vectors DIR: regenerates format-spec/test-vectors/ (files, expected descriptions, README table).
#include <fstream>
#include <iostream>

#include "vectors/hint_vectors.h"
#include "vectors/vector_builder.h"

namespace {
bool WriteFile(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(n));
  return bool(f);
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
