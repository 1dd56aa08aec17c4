// What the C API gives the image server process of a shared-memory restore (capi::ServerFlags): the block cache
// and the key and keyring files the caller's open options name, as the tools pass their own flags on; and a clear
// refusal for keys given only in memory, which another process cannot receive.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "halite/halite_c.h"
#include "support/temp_dir.h"

using namespace halite;

namespace {

std::string Vector(const std::string& name) { return std::string(HALITE_VECTOR_DIR) + "/encrypted/" + name; }

}  // namespace

TEST_CASE("the image server of a C API restore gets the caller's block cache and key files", "[capi][keys]") {
  testing::TempDir dir;
  hlt_open_options* o = nullptr;
  REQUIRE(hlt_open_options_create(&o) == HLT_OK);
  REQUIRE(hlt_open_options_set_string(o, HLT_OPEN_BLOCK_CACHE_DIR, (dir.path() + "/cache").c_str()) == HLT_OK);
  REQUIRE(hlt_open_options_set_param(o, HLT_OPEN_BLOCK_CACHE_SIZE, 64 << 20) == HLT_OK);
  REQUIRE(hlt_open_options_set_string(o, HLT_OPEN_KEY_FILE, Vector("key-a.key").c_str()) == HLT_OK);
  REQUIRE(hlt_open_options_set_string(o, HLT_OPEN_KEYRING_FILE, Vector("keyring").c_str()) == HLT_OK);
  ReaderOptions made;
  REQUIRE(capi::MakeReaderOptions(*o, &made).ok());
  auto flags = capi::ServerFlags(*o, made);
  REQUIRE(flags.has_value());
  const std::vector<std::string> expected = {
      "--block-cache", std::filesystem::absolute(dir.path() + "/cache").string(), "--block-cache-size",
      std::to_string(64 << 20), "--encrypt-key-file", std::filesystem::absolute(Vector("key-a.key")).string(),
      "--keyring", std::filesystem::absolute(Vector("keyring")).string()};
  CHECK(*flags == expected);

  // A key file that does not read is refused where it is given, and is not passed on.
  CHECK(hlt_open_options_set_string(o, HLT_OPEN_KEY_FILE, (dir.path() + "/missing.key").c_str()) != HLT_OK);
  REQUIRE(capi::MakeReaderOptions(*o, &made).ok());
  CHECK(capi::ServerFlags(*o, made)->size() == expected.size());
  hlt_open_options_free(o);
}

TEST_CASE("keys given in memory cannot reach the image server: refused, saying what to give instead", "[capi][keys]") {
  hlt_open_options* o = nullptr;
  REQUIRE(hlt_open_options_create(&o) == HLT_OK);
  hlt_keyring* ring = nullptr;
  REQUIRE(hlt_keyring_create(&ring) == HLT_OK);
  REQUIRE(hlt_keyring_add_file(ring, Vector("keyring").c_str()) == HLT_OK);
  REQUIRE(hlt_open_options_set_keyring(o, ring) == HLT_OK);
  hlt_keyring_free(ring);
  ReaderOptions made;
  REQUIRE(capi::MakeReaderOptions(*o, &made).ok());
  auto flags = capi::ServerFlags(*o, made);
  REQUIRE_FALSE(flags.has_value());
  CHECK(flags.error().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(flags.error().message(), Catch::Contains("HLT_OPEN_KEY_FILE"));
  hlt_open_options_free(o);
}
