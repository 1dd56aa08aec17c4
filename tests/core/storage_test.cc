// Storage backends: the atomic sink's all-or-nothing behaviour, memory files, batched reads.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <fstream>

#include "halite/storage.h"
#include "support/temp_dir.h"

using namespace halite;

namespace {
std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}
std::string Slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE("atomic sink publishes only on commit", "[storage]") {
  testing::TempDir dir;
  for (bool uring : {false, true}) {
    std::string path = dir.File(uring ? "u.bin" : "p.bin");
    {
      auto s = CreateAtomicFileSink(path, {uring, true});
      REQUIRE(s.has_value());
      std::vector<uint8_t> data(3 << 20, 0x61);
      REQUIRE((*s)->Append(data).ok());
      CHECK(::access(path.c_str(), F_OK) != 0);  // nothing visible yet
      REQUIRE((*s)->Commit().ok());
    }
    CHECK(Slurp(path).size() == (3u << 20));
    // Replacing an existing file: the old one stays until commit, then the new one is there, no strays.
    {
      auto s = CreateAtomicFileSink(path, {uring, true});
      std::vector<uint8_t> data(10, 0x62);
      REQUIRE((*s)->Append(data).ok());
      CHECK(Slurp(path).size() == (3u << 20));
      REQUIRE((*s)->Commit().ok());
    }
    CHECK(Slurp(path) == std::string(10, 'b'));
  }
  CHECK(List(dir.path()).size() == 2);
}

TEST_CASE("atomic sink leaves nothing when aborted or destroyed", "[storage]") {
  testing::TempDir dir;
  {
    auto s = CreateAtomicFileSink(dir.File("x"), {});
    std::vector<uint8_t> data(5000, 1);
    REQUIRE((*s)->Append(data).ok());
    (*s)->Abort();
  }
  {
    auto s = CreateAtomicFileSink(dir.File("y"), {});
    std::vector<uint8_t> data(5000, 1);
    REQUIRE((*s)->Append(data).ok());
  }  // destroyed without commit
  CHECK(List(dir.path()).empty());
}

TEST_CASE("a positional output file is all or nothing", "[storage]") {
  testing::TempDir dir;
  auto f = CreateAtomicOutputFile(dir.File("img"), 1 << 20);
  REQUIRE(f.has_value());
  std::vector<uint8_t> d(4096, 9);
  REQUIRE((*f)->WriteAt(8192, d).ok());
  (*f)->Abort();
  CHECK(List(dir.path()).empty());
  auto g = CreateAtomicOutputFile(dir.File("img"), 1 << 20);
  REQUIRE((*g)->WriteAt(8192, d).ok());
  REQUIRE((*g)->Commit().ok());
  std::string s = Slurp(dir.File("img"));
  REQUIRE(s.size() == (1u << 20));
  CHECK(s[8192] == 9);
  CHECK(s[0] == 0);
}

TEST_CASE("local file reads, bounds, and batches", "[storage]") {
  testing::TempDir dir;
  std::string path = dir.File("f");
  std::vector<uint8_t> content(1 << 20);
  for (size_t i = 0; i < content.size(); ++i) content[i] = uint8_t(i * 7);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<char*>(content.data()), long(content.size()));
  for (bool uring : {false, true}) {
    auto f = OpenLocalFile(path, {uring});
    REQUIRE(f.has_value());
    std::vector<uint8_t> a(1000), b(70000), c(1);
    std::vector<ReadRequest> reqs = {{5, a, {}}, {300000, b, {}}, {content.size() - 1, c, {}}};
    REQUIRE((*f)->ReadBatch(reqs).ok());
    CHECK(std::equal(a.begin(), a.end(), content.begin() + 5));
    CHECK(std::equal(b.begin(), b.end(), content.begin() + 300000));
    CHECK(c[0] == content.back());
    std::vector<uint8_t> over(2);
    CHECK((*f)->ReadAt(content.size() - 1, over).code() == StatusCode::kInvalidArgument);
  }
  CHECK(OpenLocalFile(dir.File("missing")).error().code() == StatusCode::kIoError);
}
