// Which user a libvirt-started QEMU runs as (qemu_process_owner.h).
#include "qemu_process_owner.h"

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace halite::libvirt {
namespace {

bool Named(const xmlNode* n, const char* name) {
  return n->type == XML_ELEMENT_NODE && std::strcmp(reinterpret_cast<const char*>(n->name), name) == 0;
}

std::string Content(const xmlNode* n) {
  xmlChar* c = xmlNodeGetContent(n);
  std::string s = c ? reinterpret_cast<const char*>(c) : "";
  xmlFree(c);
  return s;
}

// "+64055" -> 64055 (libvirt writes numeric ids with a '+').
bool ParseId(std::string_view s, unsigned* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

struct XmlDoc {
  xmlDocPtr doc;
  ~XmlDoc() {
    if (doc) xmlFreeDoc(doc);
  }
};

}  // namespace

Result<std::optional<ProcessOwner>> DacOwnerFromCapabilities(const std::string& capabilities_xml,
                                                             const std::string& domain_type) {
  XmlDoc d{xmlReadMemory(capabilities_xml.data(), static_cast<int>(capabilities_xml.size()), "capabilities.xml",
                         nullptr, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING)};
  xmlNode* root = d.doc ? xmlDocGetRootElement(d.doc) : nullptr;
  if (root == nullptr) return Status::Corrupt("libvirt's capabilities are not well-formed XML");
  for (xmlNode* host = root->children; host; host = host->next) {
    if (!Named(host, "host")) continue;
    for (xmlNode* sec = host->children; sec; sec = sec->next) {
      if (!Named(sec, "secmodel")) continue;
      bool dac = false;
      std::string label;
      for (xmlNode* c = sec->children; c; c = c->next) {
        if (Named(c, "model")) dac = Content(c) == "dac";
        if (Named(c, "baselabel")) {
          xmlChar* type = xmlGetProp(c, reinterpret_cast<const xmlChar*>("type"));
          const bool ours = type && domain_type == reinterpret_cast<const char*>(type);
          xmlFree(type);
          if (ours) label = Content(c);
        }
      }
      if (!dac || label.empty()) continue;
      const size_t colon = label.find(':');
      unsigned uid = 0, gid = 0;
      if (colon == std::string::npos || !ParseId(std::string_view(label).substr(0, colon), &uid) ||
          !ParseId(std::string_view(label).substr(colon + 1), &gid)) {
        return Status::Corrupt("libvirt's DAC label for " + domain_type + " domains is not UID:GID: \"" + label + "\"");
      }
      return std::optional<ProcessOwner>(ProcessOwner{static_cast<uid_t>(uid), static_cast<gid_t>(gid)});
    }
  }
  return std::optional<ProcessOwner>();
}

Result<ProcessOwner> ExpectedQemuOwner(const std::string& capabilities_xml, const std::string& domain_type,
                                       const std::string& fallback_path) {
  HLT_ASSIGN_OR_RETURN(std::optional<ProcessOwner> dac, DacOwnerFromCapabilities(capabilities_xml, domain_type));
  if (dac) return *dac;
  struct stat st {};
  if (stat(fallback_path.c_str(), &st) != 0) {
    return Status::IoError(fallback_path + ": cannot stat it to learn who QEMU runs as", errno);
  }
  return ProcessOwner{st.st_uid, st.st_gid};
}

Status GiveToOwner(const std::string& path, const ProcessOwner& owner) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return Status::IoError(path + ": cannot stat it", errno);
  if (st.st_uid == owner.uid && st.st_gid == owner.gid) return Status::Ok();
  if (chown(path.c_str(), owner.uid, owner.gid) != 0) {
    return Status::IoError(fmt::format("{}: cannot give it to uid {} gid {}, the user QEMU runs as (we are uid {})",
                                       path, owner.uid, owner.gid, geteuid()),
                           errno);
  }
  return Status::Ok();
}

bool UnprivilegedUserfaultfdOff() {
  FILE* f = std::fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
  if (f == nullptr) return false;
  const int c = std::fgetc(f);
  std::fclose(f);
  return c == '0';
}

Status CheckQemuCanUseUserfaultfd(const std::string& qmp_socket_path, const std::string& domain) {
  struct stat st {};
  if (stat(qmp_socket_path.c_str(), &st) != 0) {
    return Status::IoError(qmp_socket_path + ": QEMU's QMP socket is gone", errno);
  }
  // QEMU runs without CAP_SYS_PTRACE under libvirt whatever its uid, but as root it has it on this host.
  if (st.st_uid == 0 || !UnprivilegedUserfaultfdOff()) return Status::Ok();
  return Status::Unsupported(fmt::format(
      "domain {}: QEMU runs as uid {}, and this kernel lets only privileged processes use userfaultfd "
      "(vm.unprivileged_userfaultfd = 0), which QEMU 7.2's postcopy needs for a lazy restore. Set "
      "`sysctl vm.unprivileged_userfaultfd=1`, run QEMU as root (user/group in qemu.conf), or restore --eager. "
      "The domain was destroyed",
      domain, st.st_uid));
}

}  // namespace halite::libvirt
