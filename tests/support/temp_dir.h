// A temporary directory removed (with its contents) when the object dies.
#ifndef HALITE_TESTS_TEMP_DIR_H_
#define HALITE_TESTS_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace halite::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "halite-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace halite::testing

#endif  // HALITE_TESTS_TEMP_DIR_H_
