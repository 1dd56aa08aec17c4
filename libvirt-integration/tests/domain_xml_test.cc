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
  auto renamed = x->GiveClonePathsOfItsOwn("desk1-clone-a");
  REQUIRE(renamed.has_value());
  REQUIRE(renamed->size() == 1);  // the console mirrors the serial port: one file, one new path
  CHECK((*renamed)[0].from == "/var/log/desk1.log");
  CHECK((*renamed)[0].to == "/var/log/desk1.log.desk1-clone-a");
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

// A desktop's per-domain files, as libvirt 9.0 writes its migratable XML: UEFI variables, a TPM emulator, a pty
// serial console with a log, a guest agent channel, a VNC unix socket, a SPICE server on fixed ports.
const char* kDesktop = R"(<domain type='qemu'>
  <name>desk2</name>
  <uuid>5b1b4c1e-1b6e-4f9a-9d55-2f0a9f0e8c11</uuid>
  <os>
    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>
    <loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>
    <nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/var/lib/libvirt/qemu/nvram/desk2_VARS.fd</nvram>
  </os>
  <devices>
    <serial type='pty'>
      <log file='/var/log/desk2/console.log' append='off'/>
      <target type='isa-serial' port='0'/>
    </serial>
    <console type='pty'>
      <log file='/var/log/desk2/console.log' append='off'/>
      <target type='serial' port='0'/>
    </console>
    <channel type='unix'>
      <source mode='bind' path='/run/desk2/agent.sock'/>
      <target type='virtio' name='org.qemu.guest_agent.0'/>
    </channel>
    <channel type='unix'>
      <source mode='connect' path='/run/broker/feed.sock'/>
      <target type='virtio' name='com.example.feed'/>
    </channel>
    <graphics type='vnc' socket='/run/desk2/vnc.sock'>
      <listen type='socket' socket='/run/desk2/vnc.sock'/>
    </graphics>
    <graphics type='spice' port='5930' tlsPort='5931' autoport='no'>
      <listen type='address' address='127.0.0.1'/>
    </graphics>
    <tpm model='tpm-crb'><backend type='emulator' version='2.0'/></tpm>
  </devices>
</domain>
)";

TEST_CASE("domain xml: a clone gets its own log, sockets, ports and NVRAM path; shared things stay", "[domain_xml]") {
  auto x = DomainXml::Parse(kDesktop, "saved");
  REQUIRE(x.has_value());
  CHECK(x->NvramPath() == "/var/lib/libvirt/qemu/nvram/desk2_VARS.fd");
  CHECK(x->TpmEmulatorVersion() == "2.0");
  CHECK(x->HasGuestAgentChannel());
  auto renamed = x->GiveClonePathsOfItsOwn("c1");
  REQUIRE(renamed.has_value());
  std::vector<std::string> whats, tos;
  for (const auto& r : *renamed) {
    whats.push_back(r.what);
    tos.push_back(r.to);
  }
  CHECK(whats == std::vector<std::string>{"serial 0 log", "channel org.qemu.guest_agent.0 socket",
                                          "graphics vnc socket", "graphics spice port"});
  CHECK(tos == std::vector<std::string>{"/var/log/desk2/console.log.c1", "/run/desk2/agent.sock.c1",
                                        "/run/desk2/vnc.sock.c1", "automatic"});
  REQUIRE(x->SetNvramPath("/clones/c1_VARS.fd").ok());
  x->SetUuid("11111111-2222-4333-8444-555555555555");
  const std::string out = x->Format();
  CHECK(out.find("<log file=\"/var/log/desk2/console.log.c1\" append=\"off\"/>") != std::string::npos);
  CHECK(out.find("/var/log/desk2/console.log\"") == std::string::npos);  // the console's log too
  CHECK(out.find("/run/broker/feed.sock\"") != std::string::npos);       // a socket QEMU connects to: shared
  CHECK(out.find("<graphics type=\"vnc\" socket=\"/run/desk2/vnc.sock.c1\">") != std::string::npos);
  CHECK(out.find("<listen type=\"socket\" socket=\"/run/desk2/vnc.sock.c1\"/>") != std::string::npos);
  CHECK(out.find("5930") == std::string::npos);
  CHECK(out.find("autoport=\"yes\"") != std::string::npos);
  CHECK(out.find(">/clones/c1_VARS.fd</nvram>") != std::string::npos);
  CHECK(out.find("template=\"/usr/share/OVMF/OVMF_VARS_4M.fd\"") != std::string::npos);
  CHECK(out.find("/usr/share/OVMF/OVMF_CODE_4M.fd") != std::string::npos);  // read-only firmware: shared
  auto back = DomainXml::Parse(out, "edited");
  REQUIRE(back.has_value());
  CHECK(back->uuid() == "11111111-2222-4333-8444-555555555555");
  CHECK(back->NvramPath() == "/clones/c1_VARS.fd");
}

TEST_CASE("domain xml: a clone's socket path that cannot be bound is refused, naming it", "[domain_xml]") {
  const std::string dir = "/run/" + std::string(90, 'd');
  auto x = DomainXml::Parse("<domain><name>a</name><devices><channel type='unix'><source mode='bind' path='" + dir +
                                "/agent.sock'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>"
                                "</devices></domain>",
                            "t");
  REQUIRE(x.has_value());
  auto renamed = x->GiveClonePathsOfItsOwn("a-long-clone-name");
  REQUIRE(!renamed.has_value());
  CHECK(renamed.error().message().find("channel org.qemu.guest_agent.0 socket") != std::string::npos);
  CHECK(renamed.error().message().find("107 bytes") != std::string::npos);
  auto none = DomainXml::Parse("<domain><name>a</name></domain>", "t");
  CHECK(none->NvramPath().empty());
  CHECK(none->SetNvramPath("/x").code() == StatusCode::kNotFound);
  CHECK(none->TpmEmulatorVersion().empty());
  CHECK(!none->HasGuestAgentChannel());
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

TEST_CASE("the private QMP socket beside its scratch directory is dropped too, a look-alike is kept") {
  auto xml = DomainXml::Parse(kSaved, "saved").value();
  xml.AddQemuArgs({"-incoming", "defer", "-qmp", "unix:/tmp/hlt-libvirt-Ab12Cd.qmp.sock,server=on,wait=off", "-qmp",
                   "unix:/tmp/hlt-libvirt-Ab12Cd-qmp.sock,server=on,wait=off"});
  auto saved = DomainXml::Parse(xml.Format(), "saved clone").value();
  CHECK(saved.DropRestoreQemuArgs() == 2);
  const std::string text = saved.Format();
  CHECK(text.find("hlt-libvirt-Ab12Cd.qmp.sock") == std::string::npos);
  CHECK(text.find("hlt-libvirt-Ab12Cd-qmp.sock") != std::string::npos);
}
