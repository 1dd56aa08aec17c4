// Frozen disk records: their JSON, and noticing an image that changed.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "frozen_disks.h"
#include "halite/libvirt/libvirt_checkpoint.h"

using namespace halite;
using namespace halite::libvirt;

TEST_CASE("frozen disks: JSON round trip, damaged records are refused", "[frozen_disks]") {
  std::vector<FrozenDisk> in = {{"vda", "/img/a b\"c.qcow2", "qcow2", 1234, "00112233445566778899aabbccddeeff"}};
  auto back = DecodeFrozenDisks(EncodeFrozenDisks(in), "blob");
  REQUIRE(back.has_value());
  REQUIRE(back->size() == 1);
  CHECK((*back)[0].path == in[0].path);
  CHECK((*back)[0].size == 1234);
  CHECK(DecodeFrozenDisks("{", "blob").error().code() == StatusCode::kCorrupt);
  CHECK(DecodeFrozenDisks(R"([{"target":"vda","path":"relative","format":"raw","size":1,"xxh3_128":"x"}])", "blob")
            .error()
            .message()
            .find("blob: disk 0") != std::string::npos);
  CHECK(!DecodeFrozenDisks(R"([{"target":"vda","path":"/a","format":"raw","size":-1,"xxh3_128":"x"}])", "b"));
}

TEST_CASE("frozen disks: a changed, resized or vanished image is refused", "[frozen_disks]") {
  char dir[] = "/tmp/hlt-frozen-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string img = std::string(dir) + "/base.img";
  std::ofstream(img, std::ios::binary) << std::string(100000, 'a');
  FrozenDisk d{"vda", img, "raw", 0, ""};
  REQUIRE(Fingerprint(img, &d.size, &d.xxh3_128).ok());
  CHECK(d.size == 100000);
  CHECK(VerifyFrozenDisks({d}).ok());
  {
    std::fstream f(img, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f << 'b';  // same size, one byte different
  }
  Status s = VerifyFrozenDisks({d});
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("changed since the save") != std::string::npos);
  std::remove(img.c_str());
  s = VerifyFrozenDisks({d});
  CHECK(s.message().find("is gone or unreadable") != std::string::npos);
  rmdir(dir);
}

TEST_CASE("frozen disks: an overlay never replaces an existing file", "[frozen_disks]") {
  char dir[] = "/tmp/hlt-overlay-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string base = std::string(dir) + "/base.img", overlay = std::string(dir) + "/o.qcow2";
  std::ofstream(base, std::ios::binary) << std::string(65536, '\0');
  std::ofstream(overlay) << "precious";
  Status s = CreateOverlay(base, "raw", overlay);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  std::remove(overlay.c_str());
  s = CreateOverlay(base, "raw", overlay);
  INFO(s.ToString());
  CHECK(s.ok());
  std::remove(overlay.c_str());
  std::remove(base.c_str());
  rmdir(dir);
}
