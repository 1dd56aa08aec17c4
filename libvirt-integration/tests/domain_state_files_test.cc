// NVRAM and TPM state in a checkpoint: the blobs a save writes, what a restore accepts, where the TPM state goes.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "domain_state_files.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"

using namespace halite;
using namespace halite::libvirt;

namespace {

std::string TempDir() {
  char dir[] = "/tmp/hlt-state-files-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  return dir;
}

// A checkpoint of one zero page and the given blobs.
std::string Checkpoint(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& blobs) {
  const std::string path = dir + "/c.hlt";
  std::filesystem::remove(path);
  auto w = CheckpointWriter::Create(path, WriterOptions{});
  REQUIRE(w.has_value());
  REQUIRE((*w)->AddRegion("ram", 0, 4096).has_value());
  REQUIRE((*w)->PutZeroPages(0, 0, 1).ok());
  for (const auto& [name, bytes] : blobs) {
    REQUIRE((*w)->AddBlob(name, std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())).ok());
  }
  REQUIRE((*w)->Finish().has_value());
  return path;
}

}  // namespace

TEST_CASE("state files: the blobs a save adds come back, other blobs are not state files", "[state_files]") {
  const std::string dir = TempDir();
  DomainStateFiles saved;
  saved.nvram_path = "/var/lib/libvirt/qemu/nvram/d_VARS.fd";
  saved.nvram.assign(131072, 0x5a);
  saved.tpm_files = {{"tpm2-00.permall", std::vector<uint8_t>(6101, 7)}, {"tpm2-00.volatilestate", {1, 2, 3}}};
  const std::string path = dir + "/c.hlt";
  {
    auto w = CheckpointWriter::Create(path, WriterOptions{});
    REQUIRE(w.has_value());
    REQUIRE((*w)->AddRegion("ram", 0, 4096).has_value());
    REQUIRE((*w)->PutZeroPages(0, 0, 1).ok());
    REQUIRE(AddDomainStateBlobs(**w, saved).ok());
    REQUIRE((*w)->Finish().has_value());
  }
  auto r = CheckpointReader::Open(path);
  REQUIRE(r.has_value());
  auto back = ReadDomainStateBlobs(**r);
  REQUIRE(back.has_value());
  CHECK(back->nvram == saved.nvram);
  REQUIRE(back->tpm_files.size() == 2);
  CHECK(back->tpm_files[0].name == "tpm2-00.permall");
  CHECK(back->tpm_files[0].bytes == saved.tpm_files[0].bytes);
  CHECK(back->tpm_files[1].bytes == std::vector<uint8_t>{1, 2, 3});

  // A checkpoint saved before state files were kept has none: not an error.
  auto none = CheckpointReader::Open(Checkpoint(dir, {{"qemu.vmstate", "x"}}));
  REQUIRE(none.has_value());
  auto empty = ReadDomainStateBlobs(**none);
  REQUIRE(empty.has_value());
  CHECK(empty->nvram_path.empty());
  CHECK(empty->tpm_files.empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("state files: a TPM file name that is a path is refused (untrusted checkpoint)", "[state_files]") {
  const std::string dir = TempDir();
  for (const char* bad : {"libvirt.tpm/../../etc/passwd", "libvirt.tpm/.lock", "libvirt.tpm/", "libvirt.tpm/a/b"}) {
    auto r = CheckpointReader::Open(Checkpoint(dir, {{bad, "x"}}));
    REQUIRE(r.has_value());
    auto files = ReadDomainStateBlobs(**r);
    REQUIRE(!files.has_value());
    CHECK(files.error().code() == StatusCode::kCorrupt);
    CHECK(files.error().message().find(std::string("blob ") + bad) != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("state files: the TPM state goes under STORAGE/UUID/tpm2 as libvirt expects it", "[state_files]") {
  const std::string dir = TempDir();
  const std::string state = TpmStatePath(dir + "/swtpm", "0d7f0836-776c-4f1b-ade9-4b6f32fdc09f", "2.0");
  CHECK(state == dir + "/swtpm/0d7f0836-776c-4f1b-ade9-4b6f32fdc09f/tpm2");
  CHECK(TpmStatePath("/s", "u", "1.2") == "/s/u/tpm1.2");
  REQUIRE(InstallTpmState({{"tpm2-00.permall", {9, 9, 9}}}, state).ok());
  struct stat st;
  REQUIRE(stat(state.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(stat((dir + "/swtpm/0d7f0836-776c-4f1b-ade9-4b6f32fdc09f").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0711);
  std::ifstream f(state + "/tpm2-00.permall", std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(f), {}) == std::string("\x09\x09\x09"));
  // Installed again (a restore as itself over what is there): replaced, not refused.
  REQUIRE(InstallTpmState({{"tpm2-00.permall", {1}}}, state).ok());
  CHECK(std::filesystem::file_size(state + "/tpm2-00.permall") == 1);
  // A new file is never written over.
  CHECK(WriteNewFile(state + "/tpm2-00.permall", {2}).code() == StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}
