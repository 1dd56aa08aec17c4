// libFuzzer target for what a restore reads from a checkpoint's libvirt blobs (wired into the fuzz build by the
// top level): the domain XML (libvirt.domain.xml) and the frozen-disk records (libvirt.disks.json).
//
// The input is the XML, then optionally a NUL byte and the JSON. An XML the parser accepts must take every edit a
// restore makes and still format to XML it accepts again; a JSON it accepts must encode back to the same records.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "../src/frozen_disks.h"
#include "halite/libvirt/domain_xml.h"

using namespace halite;
using namespace halite::libvirt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string xml_text = input.substr(0, nul);
  auto xml = DomainXml::Parse(xml_text, "fuzz");
  if (xml) {
    (void)xml->name();
    (void)xml->uuid();
    (void)xml->genid();
    (void)xml->DiskTargets();
    auto disks = xml->WritableDisks();
    xml->SetName("fuzz-clone");
    xml->DropUuid();
    xml->DropMacs();
    xml->RenewGenid();
    (void)xml->GiveClonePathsOfItsOwn("fuzz-clone");
    (void)xml->NvramPath();
    (void)xml->SetNvramPath("/clones/fuzz-clone_VARS.fd");
    (void)xml->TpmEmulatorVersion();
    (void)xml->HasGuestAgentChannel();
    xml->SetUuid("0d7f0836-776c-4f1b-ade9-4b6f32fdc09f");
    if (disks) {
      for (const auto& d : *disks) {
        if (!xml->SetDiskSource(d.target, "/overlay/" + d.target + ".qcow2", "qcow2").ok()) abort();
      }
    }
    xml->AddQemuArgs({"-incoming", "defer"});
    auto again = DomainXml::Parse(xml->Format(), "fuzz formatted");
    if (!again || again->name() != "fuzz-clone") abort();
  }
  if (nul != std::string::npos) {
    auto disks = DecodeFrozenDisks(input.substr(nul + 1), "fuzz");
    if (disks) {
      auto back = DecodeFrozenDisks(EncodeFrozenDisks(*disks), "fuzz encoded");
      if (!back || back->size() != disks->size()) abort();
      for (size_t i = 0; i < disks->size(); ++i) {
        if ((*back)[i].path != (*disks)[i].path || (*back)[i].size != (*disks)[i].size) abort();
      }
    }
  }
  return 0;
}
