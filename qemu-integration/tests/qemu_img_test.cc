// qemu-img's failures carry its own reason (issue 28: "failed (status 256)" and nothing else).
#include <unistd.h>

#include <catch2/catch.hpp>

#include "halite/qemu/qemu_img.h"

using namespace halite;

TEST_CASE("qemu-img: a failure says how it ended and what qemu-img wrote on stderr", "[qemu_img]") {
  if (access("/usr/bin/qemu-img", X_OK) != 0) {
    WARN("qemu-img is not installed (package qemu-utils): not checked");
    return;
  }
  const std::string overlay = "/nonexistent-hlt-dir/overlay.qcow2";
  Status s = qemu::RunQemuImg({"create", "-q", "-f", "qcow2", overlay, "1M"});
  REQUIRE(!s.ok());
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("qemu-img create -q -f qcow2 " + overlay + " 1M failed (exit status 1)") !=
        std::string::npos);
  CHECK(s.message().find("qemu-img: " + overlay) != std::string::npos);  // its own words
  CHECK(s.message().find("No such file or directory") != std::string::npos);
  CHECK(s.message().find("status 256") == std::string::npos);
}
