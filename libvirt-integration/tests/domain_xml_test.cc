// The domain XML edits a restore makes, on XML as libvirt writes it.
#include <catch2/catch.hpp>

#include "halite/libvirt/domain_xml.h"

using namespace halite;
using namespace halite::libvirt;

namespace {

const char* kSaved = R"(<domain type='qemu'>
  <name>desk1</name>
  <uuid>0d7f0836-776c-4f1b-ade9-4b6f32fdc09f</uuid>
  <genid>9e2c4a34-5c2e-4b4e-9a8e-2a3f9d1c7b10</genid>
  <memory unit='KiB'>262144</memory>
  <os><type arch='x86_64' machine='pc-i440fx-7.2'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/images/desk1.img'/>
      <backingStore/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <source file='/iso/tools.iso'/>
      <target dev='hdc' bus='ide'/>
      <readonly/>
    </disk>
    <disk type='file' device='disk'>
      <source file='/var/lib/images/shared.img'/>
      <target dev='vdb' bus='virtio'/>
      <shareable/>
    </disk>
    <serial type='file'><source path='/var/log/desk1.log'/><target port='0'/></serial>
    <console type='file'><source path='/var/log/desk1.log'/><target type='serial' port='0'/></console>
    <interface type='user'>
      <mac address='52:54:00:12:34:56'/>
      <model type='virtio'/>
    </interface>
  </devices>
</domain>
)";

}  // namespace

TEST_CASE("domain xml: writable disks are the file-backed, unshared, writable ones", "[domain_xml]") {
  auto x = DomainXml::Parse(kSaved, "saved");
  REQUIRE(x.has_value());
  auto disks = x->WritableDisks();
  REQUIRE(disks.has_value());
  REQUIRE(disks->size() == 1);
  CHECK((*disks)[0].target == "vda");
  CHECK((*disks)[0].source == "/var/lib/images/desk1.img");
  CHECK((*disks)[0].format == "raw");
  CHECK(x->DiskTargets() == std::vector<std::string>{"vda", "hdc", "vdb"});
  const auto nics = x->InterfaceElements();
  REQUIRE(nics.size() == 1);
  CHECK(nics[0].rfind("<interface type=\"user\">", 0) == 0);
  CHECK(nics[0].find("52:54:00:12:34:56") != std::string::npos);
}

TEST_CASE("domain xml: a clone gets a new name, loses UUID and MACs, renews its genid, points at its overlay",
          "[domain_xml]") {
  auto x = DomainXml::Parse(kSaved, "saved");
  REQUIRE(x.has_value());
  x->SetName("desk1-clone-a");
  x->DropUuid();
  CHECK(x->DropMacs() == 1);
  CHECK(x->RenewGenid());
  REQUIRE(x->SetDiskSource("vda", "/clones/desk1-clone-a-vda.qcow2", "qcow2").ok());
  CHECK(x->SetDiskSource("vdz", "/x", "raw").code() == StatusCode::kNotFound);
  CHECK(x->SuffixCharDeviceFiles("desk1-clone-a") ==
        std::vector<std::string>{"/var/log/desk1.log.desk1-clone-a", "/var/log/desk1.log.desk1-clone-a"});
  x->AddQemuArgs({"-incoming", "defer"});
  const std::string out = x->Format();
  auto back = DomainXml::Parse(out, "edited");
  REQUIRE(back.has_value());
  CHECK(back->name() == "desk1-clone-a");
  CHECK(back->uuid().empty());
  CHECK(back->genid().empty());
  CHECK(out.find("<genid/>") != std::string::npos);
  CHECK(out.find("52:54:00:12:34:56") == std::string::npos);
  CHECK(out.find("<source file=\"/clones/desk1-clone-a-vda.qcow2\"/>") != std::string::npos);
  CHECK(out.find("type=\"qcow2\"") != std::string::npos);
  CHECK(out.find("<backingStore") == std::string::npos);
  CHECK(out.find("xmlns:qemu=\"http://libvirt.org/schemas/domain/qemu/1.0\"") != std::string::npos);
  CHECK(out.find("<qemu:arg value=\"-incoming\"/>") != std::string::npos);
  CHECK(out.find("<qemu:arg value=\"defer\"/>") != std::string::npos);
}

TEST_CASE("domain xml: no genid stays no genid", "[domain_xml]") {
  auto x = DomainXml::Parse("<domain><name>a</name></domain>", "t");
  REQUIRE(x.has_value());
  CHECK(!x->RenewGenid());
  CHECK(x->Format().find("genid") == std::string::npos);
}

TEST_CASE("domain xml: untrusted input is refused with a clear error", "[domain_xml]") {
  CHECK(DomainXml::Parse("", "ckpt blob").error().code() == StatusCode::kCorrupt);
  auto bad = DomainXml::Parse("<domain><name>a</domain>", "ckpt blob");
  REQUIRE(!bad.has_value());
  CHECK(bad.error().message().find("ckpt blob: not well-formed XML") != std::string::npos);
  CHECK(DomainXml::Parse("<network/>", "b").error().message() == "b: the document is not a <domain>");
  // An external entity is never fetched or expanded.
  auto ent = DomainXml::Parse(
      "<!DOCTYPE d [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><domain><name>&x;</name></domain>", "e");
  if (ent.has_value()) CHECK(ent->name().find("root:") == std::string::npos);
  // A network disk cannot be frozen: said, not skipped.
  auto net = DomainXml::Parse(
      "<domain><devices><disk type='network' device='disk'><target dev='vda'/></disk></devices></domain>", "n");
  REQUIRE(net.has_value());
  CHECK(net->WritableDisks().error().code() == StatusCode::kUnsupported);
}

TEST_CASE("the guest's RAM size and a private file memory backing (--memory shared)") {
  auto xml = DomainXml::Parse(kSaved, "saved").value();
  CHECK(xml.MemoryBytes().value() == 256u << 20);
  REQUIRE(xml.SetPrivateFileMemoryBacking().ok());
  const std::string text = xml.Format();
  CHECK(text.find("<memoryBacking>") != std::string::npos);
  CHECK(text.find("<source type=\"file\"/>") != std::string::npos);
  CHECK(text.find("<access mode=\"private\"/>") != std::string::npos);
  // A second one, or a domain with a memory backing of its own, is refused.
  auto again = DomainXml::Parse(text, "edited").value();
  Status s = again.SetPrivateFileMemoryBacking();
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("<memoryBacking>") != std::string::npos);

  auto gib = DomainXml::Parse("<domain><name>d</name><memory unit='GiB'>2</memory></domain>", "d").value();
  CHECK(gib.MemoryBytes().value() == 2ull << 30);
  auto kib = DomainXml::Parse("<domain><name>d</name><memory>1024</memory></domain>", "d").value();
  CHECK(kib.MemoryBytes().value() == 1u << 20);
  auto bad = DomainXml::Parse("<domain><name>d</name><memory unit='XB'>2</memory></domain>", "d").value();
  CHECK_FALSE(bad.MemoryBytes().has_value());
  auto numa = DomainXml::Parse("<domain><name>d</name><memory>1024</memory><cpu><numa><cell id='0' cpus='0' "
                               "memory='1024'/></numa></cpu></domain>", "d").value();
  CHECK_FALSE(numa.SetPrivateFileMemoryBacking().ok());
}

TEST_CASE("a saved clone's private file memory backing is dropped before its restore, the domain's own stays") {
  auto xml = DomainXml::Parse(kSaved, "saved").value();
  CHECK_FALSE(xml.DropPrivateFileMemoryBacking());  // none there
  REQUIRE(xml.SetPrivateFileMemoryBacking().ok());
  auto saved = DomainXml::Parse(xml.Format(), "saved clone").value();
  CHECK(saved.DropPrivateFileMemoryBacking());
  CHECK(saved.Format().find("memoryBacking") == std::string::npos);
  CHECK(saved.SetPrivateFileMemoryBacking().ok());  // --memory shared again
  for (const char* own : {"<memoryBacking><hugepages/></memoryBacking>",
                          "<memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>",
                          "<memoryBacking><source type='file'/><access mode='private'/><locked/></memoryBacking>"}) {
    auto d = DomainXml::Parse(std::string("<domain><name>d</name><memory>1024</memory>") + own + "</domain>", "d").value();
    CHECK_FALSE(d.DropPrivateFileMemoryBacking());
    CHECK(d.Format().find("memoryBacking") != std::string::npos);
  }
}

TEST_CASE("the QEMU arguments an earlier restore added are dropped, the domain's own stay") {
  auto xml = DomainXml::Parse(kSaved, "saved").value();
  CHECK(xml.DropRestoreQemuArgs() == 0);
  xml.AddQemuArgs({"-device", "x", "-incoming", "defer", "-qmp",
                   "unix:/tmp/hlt-libvirt-Ab12Cd/qmp.sock,server=on,wait=off", "-qmp", "unix:/run/mine.sock,server=on"});
  auto saved = DomainXml::Parse(xml.Format(), "saved clone").value();
  CHECK(saved.DropRestoreQemuArgs() == 2);
  const std::string text = saved.Format();
  CHECK(text.find("hlt-libvirt-") == std::string::npos);
  CHECK(text.find("defer") == std::string::npos);
  CHECK(text.find("/run/mine.sock") != std::string::npos);
  CHECK(text.find("value=\"x\"") != std::string::npos);
}
