// Who QEMU runs as, read from libvirt's capabilities; who gets a clone's overlay.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "qemu_process_owner.h"

using namespace halite::libvirt;

namespace {

std::string Capabilities(const std::string& secmodels) {
  return "<capabilities><host><uuid>x</uuid><cpu><arch>x86_64</arch></cpu>" + secmodels +
         "</host><guest><os_type>hvm</os_type></guest></capabilities>";
}

const char* kDac =
    "<secmodel><model>none</model><doi>0</doi></secmodel>"
    "<secmodel><model>dac</model><doi>0</doi><baselabel type='kvm'>+64055:+108</baselabel>"
    "<baselabel type='qemu'>+64056:+109</baselabel></secmodel>";

}  // namespace

TEST_CASE("the DAC label of the domain's type names QEMU's user and group") {
  auto kvm = DacOwnerFromCapabilities(Capabilities(kDac), "kvm");
  REQUIRE(kvm.has_value());
  REQUIRE(kvm->has_value());
  CHECK((*kvm)->uid == 64055);
  CHECK((*kvm)->gid == 108);
  auto qemu = DacOwnerFromCapabilities(Capabilities(kDac), "qemu");
  REQUIRE(qemu.has_value());
  REQUIRE(qemu->has_value());
  CHECK((*qemu)->uid == 64056);
  CHECK((*qemu)->gid == 109);
}

TEST_CASE("no DAC model (a session instance) or no label for the type: no owner from the capabilities") {
  auto session = DacOwnerFromCapabilities(Capabilities("<secmodel><model>none</model><doi>0</doi></secmodel>"), "qemu");
  REQUIRE(session.has_value());
  CHECK(!session->has_value());
  auto other = DacOwnerFromCapabilities(Capabilities(kDac), "xen");
  REQUIRE(other.has_value());
  CHECK(!other->has_value());
}

TEST_CASE("a label that is not UID:GID, or capabilities that are not XML, are errors") {
  auto bad = DacOwnerFromCapabilities(
      Capabilities("<secmodel><model>dac</model><baselabel type='qemu'>libvirt-qemu</baselabel></secmodel>"), "qemu");
  REQUIRE(!bad.has_value());
  CHECK(bad.error().message().find("libvirt-qemu") != std::string::npos);
  auto half = DacOwnerFromCapabilities(
      Capabilities("<secmodel><model>dac</model><baselabel type='qemu'>+5:</baselabel></secmodel>"), "qemu");
  CHECK(!half.has_value());
  CHECK(!DacOwnerFromCapabilities("<capabilities><host>", "qemu").has_value());
}

TEST_CASE("without a DAC label QEMU's user is the owner of the image it runs on") {
  char path[] = "/tmp/hlt-owner-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  auto owner = ExpectedQemuOwner(Capabilities(""), "qemu", path);
  REQUIRE(owner.has_value());
  CHECK(owner->uid == geteuid());
  CHECK(owner->gid == getegid());
  // With a label, the label wins over the file.
  auto labelled = ExpectedQemuOwner(Capabilities(kDac), "qemu", path);
  REQUIRE(labelled.has_value());
  CHECK(labelled->uid == 64056);
  // Giving a file to its own owner changes nothing and needs no privilege.
  CHECK(GiveToOwner(path, *owner).ok());
  if (geteuid() == 0) {
    REQUIRE(GiveToOwner(path, ProcessOwner{65534, 65534}).ok());
    struct stat st {};
    REQUIRE(stat(path, &st) == 0);
    CHECK(st.st_uid == 65534);
  }
  std::remove(path);
  CHECK(!ExpectedQemuOwner(Capabilities(""), "qemu", path).has_value());
}
