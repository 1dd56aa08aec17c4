#include "halite/libvirt/domain_xml.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace halite::libvirt {
namespace {

constexpr const char* kQemuNamespace = "http://libvirt.org/schemas/domain/qemu/1.0";

const xmlChar* X(const char* s) { return reinterpret_cast<const xmlChar*>(s); }

bool Is(const xmlNode* n, const char* name) {
  return n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, X(name)) == 0 && (n->ns == nullptr || n->ns->prefix == nullptr);
}

// The first child element named `name`, or null.
xmlNode* Child(xmlNode* parent, const char* name) {
  for (xmlNode* c = parent ? parent->children : nullptr; c; c = c->next) {
    if (Is(c, name)) return c;
  }
  return nullptr;
}

std::vector<xmlNode*> Children(xmlNode* parent, const char* name) {
  std::vector<xmlNode*> out;
  for (xmlNode* c = parent ? parent->children : nullptr; c; c = c->next) {
    if (Is(c, name)) out.push_back(c);
  }
  return out;
}

std::string Text(xmlNode* n) {
  if (n == nullptr) return "";
  xmlChar* t = xmlNodeGetContent(n);
  std::string s = t ? reinterpret_cast<const char*>(t) : "";
  xmlFree(t);
  return s;
}

std::string Attr(xmlNode* n, const char* name) {
  if (n == nullptr) return "";
  xmlChar* v = xmlGetProp(n, X(name));
  std::string s = v ? reinterpret_cast<const char*>(v) : "";
  xmlFree(v);
  return s;
}

void Remove(xmlNode* n) {
  if (n == nullptr) return;
  xmlUnlinkNode(n);
  xmlFreeNode(n);
}

}  // namespace

struct DomainXml::Doc {
  xmlDocPtr doc = nullptr;
  ~Doc() {
    if (doc) xmlFreeDoc(doc);
  }
  xmlNode* root() const { return xmlDocGetRootElement(doc); }
};

DomainXml::DomainXml(std::unique_ptr<Doc> doc) : doc_(std::move(doc)) {}
DomainXml::DomainXml(DomainXml&&) noexcept = default;
DomainXml& DomainXml::operator=(DomainXml&&) noexcept = default;
DomainXml::~DomainXml() = default;

Result<DomainXml> DomainXml::Parse(const std::string& text, const std::string& what) {
  auto doc = std::make_unique<Doc>();
  // No network, no entity expansion: the XML may come from an untrusted checkpoint.
  doc->doc = xmlReadMemory(text.data(), static_cast<int>(text.size()), "domain.xml", nullptr,
                           XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (doc->doc == nullptr) {
    const xmlError* e = xmlGetLastError();
    return Status::Corrupt(what + ": not well-formed XML" +
                           (e && e->message ? std::string(" (line ") + std::to_string(e->line) + ": " + e->message : ""));
  }
  xmlNode* root = doc->root();
  if (root == nullptr || !Is(root, "domain")) return Status::Corrupt(what + ": the document is not a <domain>");
  return DomainXml(std::move(doc));
}

std::string DomainXml::Format() const {
  xmlChar* out = nullptr;
  int len = 0;
  xmlDocDumpFormatMemory(doc_->doc, &out, &len, 1);
  std::string s(reinterpret_cast<const char*>(out), static_cast<size_t>(len));
  xmlFree(out);
  return s;
}

std::string DomainXml::name() const { return Text(Child(doc_->root(), "name")); }

std::string DomainXml::type() const { return Attr(doc_->root(), "type"); }

void DomainXml::SetName(const std::string& name) {
  xmlNode* n = Child(doc_->root(), "name");
  if (n == nullptr) n = xmlNewChild(doc_->root(), nullptr, X("name"), nullptr);
  xmlNodeSetContent(n, nullptr);
  xmlNodeAddContent(n, X(name.c_str()));
}

std::string DomainXml::uuid() const { return Text(Child(doc_->root(), "uuid")); }
void DomainXml::DropUuid() { Remove(Child(doc_->root(), "uuid")); }

size_t DomainXml::DropMacs() {
  auto interfaces = Children(Child(doc_->root(), "devices"), "interface");
  for (xmlNode* i : interfaces) Remove(Child(i, "mac"));
  return interfaces.size();
}

bool DomainXml::RenewGenid() {
  xmlNode* g = Child(doc_->root(), "genid");
  if (g == nullptr) return false;
  xmlNodeSetContent(g, nullptr);
  return true;
}

std::string DomainXml::genid() const { return Text(Child(doc_->root(), "genid")); }

Result<std::vector<WritableDisk>> DomainXml::WritableDisks() const {
  std::vector<WritableDisk> out;
  for (xmlNode* d : Children(Child(doc_->root(), "devices"), "disk")) {
    if (Attr(d, "device") != "disk" && !Attr(d, "device").empty()) continue;  // cdrom, floppy, lun
    if (Child(d, "readonly") || Child(d, "shareable")) continue;
    const std::string target = Attr(Child(d, "target"), "dev");
    if (Attr(d, "type") != "file") {
      return Status::Unsupported("disk " + target + " is of type '" + Attr(d, "type") +
                                 "': only file-backed writable disks can be frozen with a checkpoint");
    }
    const std::string source = Attr(Child(d, "source"), "file");
    if (source.empty()) continue;  // an empty drive
    std::string format = Attr(Child(d, "driver"), "type");
    out.push_back(WritableDisk{target, source, format.empty() ? "raw" : format});
  }
  return out;
}

namespace {

// sun_path holds 108 bytes with the terminating NUL.
constexpr size_t kMaxUnixSocketPath = 107;

// What a character device element is called in a message: "serial 0", "channel org.qemu.guest_agent.0".
std::string ChardevLabel(xmlNode* d) {
  xmlNode* target = Child(d, "target");
  std::string id = Attr(target, "name");
  if (id.empty()) id = Attr(target, "port");
  if (id.empty()) id = Attr(target, "type");
  return reinterpret_cast<const char*>(d->name) + (id.empty() ? std::string() : " " + id);
}

// Renames attribute `attr` of `n` to VALUE.SUFFIX; the same old path always gets the same new one (a console and
// the serial port it mirrors name one log).
Status RenameAttr(xmlNode* n, const char* attr, const std::string& suffix, const std::string& what, bool socket,
                  std::vector<RenamedPath>* out) {
  const std::string from = Attr(n, attr);
  if (from.empty()) return Status::Ok();
  const std::string to = from + "." + suffix;
  if (socket && to.size() > kMaxUnixSocketPath) {
    return Status::InvalidArgument(what + ": the clone's socket path " + to + " is longer than the " +
                                   std::to_string(kMaxUnixSocketPath) +
                                   " bytes a unix socket address holds (give a shorter --name, or a shorter path "
                                   "in the domain)");
  }
  xmlSetProp(n, X(attr), X(to.c_str()));
  for (const RenamedPath& r : *out) {
    if (r.from == from) return Status::Ok();
  }
  out->push_back(RenamedPath{what, from, to});
  return Status::Ok();
}

// A character device's own files: its file (type='file'), the socket QEMU listens on (type='unix',
// mode='bind'), and its log.
Status RenameChardev(xmlNode* d, const std::string& suffix, std::vector<RenamedPath>* out) {
  const std::string what = ChardevLabel(d);
  const std::string type = Attr(d, "type");
  for (xmlNode* src : Children(d, "source")) {
    if (type == "file") HLT_RETURN_IF_ERROR(RenameAttr(src, "path", suffix, what + " file", false, out));
    if (type == "unix" && Attr(src, "mode") == "bind") {
      HLT_RETURN_IF_ERROR(RenameAttr(src, "path", suffix, what + " socket", true, out));
    }
  }
  return RenameAttr(Child(d, "log"), "file", suffix, what + " log", false, out);
}

}  // namespace

Result<std::vector<RenamedPath>> DomainXml::GiveClonePathsOfItsOwn(const std::string& suffix) {
  std::vector<RenamedPath> out;
  xmlNode* devices = Child(doc_->root(), "devices");
  for (const char* kind : {"serial", "console", "channel", "parallel", "redirdev", "smartcard"}) {
    for (xmlNode* d : Children(devices, kind)) HLT_RETURN_IF_ERROR(RenameChardev(d, suffix, &out));
  }
  for (xmlNode* rng : Children(devices, "rng")) {
    for (xmlNode* backend : Children(rng, "backend")) HLT_RETURN_IF_ERROR(RenameChardev(backend, suffix, &out));
  }
  for (xmlNode* g : Children(devices, "graphics")) {
    const std::string what = "graphics " + Attr(g, "type");
    HLT_RETURN_IF_ERROR(RenameAttr(g, "socket", suffix, what + " socket", true, &out));
    for (xmlNode* listen : Children(g, "listen")) {
      if (Attr(listen, "type") == "socket") {
        HLT_RETURN_IF_ERROR(RenameAttr(listen, "socket", suffix, what + " socket", true, &out));
      }
    }
    // A fixed TCP port can be bound by one clone only: the others get free ones.
    const std::string port = Attr(g, "port"), tls = Attr(g, "tlsPort"), ws = Attr(g, "websocket");
    const bool fixed = (!port.empty() && port != "-1" && port != "0") || (!tls.empty() && tls != "-1") ||
                       (!ws.empty() && ws != "-1");
    if (fixed && Attr(g, "autoport") != "yes") {
      xmlUnsetProp(g, X("port"));
      xmlUnsetProp(g, X("tlsPort"));
      xmlSetProp(g, X("autoport"), X("yes"));
      if (!ws.empty() && ws != "-1") xmlSetProp(g, X("websocket"), X("-1"));
      out.push_back(RenamedPath{what + " port", port, "automatic"});
    }
  }
  return out;
}

void DomainXml::SetUuid(const std::string& uuid) {
  xmlNode* u = Child(doc_->root(), "uuid");
  if (u == nullptr) u = xmlNewChild(doc_->root(), nullptr, X("uuid"), nullptr);
  xmlNodeSetContent(u, nullptr);
  xmlNodeAddContent(u, X(uuid.c_str()));
}

std::string DomainXml::NvramPath() const {
  xmlNode* nvram = Child(Child(doc_->root(), "os"), "nvram");
  if (nvram == nullptr) return "";
  if (xmlNode* src = Child(nvram, "source")) return Attr(src, "file");
  return Text(nvram);
}

Status DomainXml::SetNvramPath(const std::string& path) {
  xmlNode* nvram = Child(Child(doc_->root(), "os"), "nvram");
  if (nvram == nullptr) return Status::NotFound("domain " + name() + " has no <nvram>");
  if (xmlNode* src = Child(nvram, "source")) {
    xmlSetProp(src, X("file"), X(path.c_str()));
  } else {
    xmlNodeSetContent(nvram, nullptr);
    xmlNodeAddContent(nvram, X(path.c_str()));
  }
  return Status::Ok();
}

std::string DomainXml::TpmEmulatorVersion() const {
  for (xmlNode* tpm : Children(Child(doc_->root(), "devices"), "tpm")) {
    xmlNode* backend = Child(tpm, "backend");
    if (Attr(backend, "type") != "emulator") continue;
    const std::string v = Attr(backend, "version");
    return v.empty() ? "1.2" : v;  // libvirt 9.0's default for an emulator without a version
  }
  return "";
}

bool DomainXml::HasGuestAgentChannel() const {
  for (xmlNode* c : Children(Child(doc_->root(), "devices"), "channel")) {
    xmlNode* target = Child(c, "target");
    if (Attr(target, "type") == "virtio" && Attr(target, "name") == "org.qemu.guest_agent.0") return true;
  }
  return false;
}

std::vector<std::string> DomainXml::InterfaceElements() const {
  std::vector<std::string> out;
  for (xmlNode* i : Children(Child(doc_->root(), "devices"), "interface")) {
    xmlBufferPtr buf = xmlBufferCreate();
    xmlNodeDump(buf, doc_->doc, i, 0, 0);
    out.emplace_back(reinterpret_cast<const char*>(xmlBufferContent(buf)), static_cast<size_t>(xmlBufferLength(buf)));
    xmlBufferFree(buf);
  }
  return out;
}

std::vector<std::string> DomainXml::DiskTargets() const {
  std::vector<std::string> out;
  for (xmlNode* d : Children(Child(doc_->root(), "devices"), "disk")) out.push_back(Attr(Child(d, "target"), "dev"));
  return out;
}

Status DomainXml::SetDiskSource(const std::string& target, const std::string& source, const std::string& format) {
  for (xmlNode* d : Children(Child(doc_->root(), "devices"), "disk")) {
    if (Attr(Child(d, "target"), "dev") != target) continue;
    xmlNode* src = Child(d, "source");
    if (src == nullptr) src = xmlNewChild(d, nullptr, X("source"), nullptr);
    xmlSetProp(src, X("file"), X(source.c_str()));
    xmlNode* driver = Child(d, "driver");
    if (driver == nullptr) {
      driver = xmlNewChild(d, nullptr, X("driver"), nullptr);
      xmlSetProp(driver, X("name"), X("qemu"));
    }
    xmlSetProp(driver, X("type"), X(format.c_str()));
    // A backing chain recorded at save time is the old one: libvirt reads the new image's chain itself.
    Remove(Child(d, "backingStore"));
    return Status::Ok();
  }
  return Status::NotFound("the domain has no disk " + target);
}

Result<uint64_t> DomainXml::MemoryBytes() const {
  xmlNode* m = Child(doc_->root(), "memory");
  const std::string text = Text(m);
  std::string unit = Attr(m, "unit");
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (m == nullptr || text.empty() || errno != 0 || end == text.c_str() || *end != '\0') {
    return Status::InvalidArgument("domain " + name() + ": <memory> \"" + text + "\": expected a number");
  }
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"", 1024},          {"b", 1},           {"bytes", 1},        {"k", 1024},    {"KiB", 1024},
      {"KB", 1000},        {"M", 1 << 20},     {"MiB", 1 << 20},    {"MB", 1000000}, {"G", 1ull << 30},
      {"GiB", 1ull << 30}, {"GB", 1000000000}, {"T", 1ull << 40},   {"TiB", 1ull << 40}, {"TB", 1000000000000}};
  for (const auto& [u, scale] : kUnits) {
    if (unit == u) return uint64_t(value) * scale;
  }
  return Status::InvalidArgument("domain " + name() + ": <memory unit='" + unit + "'>: unknown unit");
}

Status DomainXml::SetPrivateFileMemoryBacking() {
  xmlNode* root = doc_->root();
  if (Child(root, "memoryBacking") != nullptr) {
    return Status::InvalidArgument("domain " + name() +
                                   " has a <memoryBacking> of its own: its RAM cannot be mapped from a checkpoint image");
  }
  if (Child(Child(Child(root, "cpu"), "numa"), "cell") != nullptr) {
    return Status::InvalidArgument("domain " + name() +
                                   " has NUMA cells (one memory backend each): only a single pc.ram can be mapped "
                                   "from a checkpoint image");
  }
  xmlNode* mb = xmlNewChild(root, nullptr, X("memoryBacking"), nullptr);
  xmlNode* source = xmlNewChild(mb, nullptr, X("source"), nullptr);
  xmlNewProp(source, X("type"), X("file"));
  xmlNode* access = xmlNewChild(mb, nullptr, X("access"), nullptr);
  xmlNewProp(access, X("mode"), X("private"));
  return Status::Ok();
}

bool DomainXml::DropPrivateFileMemoryBacking() {
  xmlNode* mb = Child(doc_->root(), "memoryBacking");
  if (mb == nullptr) return false;
  std::vector<xmlNode*> children;
  for (xmlNode* c = mb->children; c != nullptr; c = c->next) {
    if (c->type == XML_ELEMENT_NODE) children.push_back(c);
  }
  auto is = [](xmlNode* n, const char* name, const char* attr, const char* value) {
    return n != nullptr && xmlStrcmp(n->name, X(name)) == 0 && Attr(n, attr) == value && n->properties != nullptr &&
           n->properties->next == nullptr && n->children == nullptr;
  };
  if (children.size() != 2 || !is(Child(mb, "source"), "source", "type", "file") ||
      !is(Child(mb, "access"), "access", "mode", "private")) {
    return false;  // the domain's own backing: not ours to drop
  }
  xmlUnlinkNode(mb);
  xmlFreeNode(mb);
  return true;
}

int DomainXml::DropRestoreQemuArgs() {
  xmlNode* root = doc_->root();
  xmlNsPtr ns = xmlSearchNsByHref(doc_->doc, root, X(kQemuNamespace));
  if (ns == nullptr) return 0;
  int dropped = 0;
  for (xmlNode* cmdline = root->children; cmdline != nullptr; cmdline = cmdline->next) {
    if (cmdline->type != XML_ELEMENT_NODE || cmdline->ns != ns || xmlStrcmp(cmdline->name, X("commandline")) != 0) {
      continue;
    }
    std::vector<xmlNode*> args;
    for (xmlNode* a = cmdline->children; a != nullptr; a = a->next) {
      if (a->type == XML_ELEMENT_NODE && a->ns == ns && xmlStrcmp(a->name, X("arg")) == 0) args.push_back(a);
    }
    // hlt-restore's own pairs (AddQemuArgs in the restore): -incoming defer, and -qmp of its private socket.
    auto ours = [](const std::string& flag, const std::string& value) {
      if (flag == "-incoming") return value == "defer";
      // DIR.qmp.sock (DIR/qmp.sock before): qemu_process_lookup.h.
      const std::string_view tail = "qmp.sock,server=on,wait=off";
      return flag == "-qmp" && value.rfind("unix:", 0) == 0 && value.find("/hlt-libvirt-") != std::string::npos &&
             value.size() > tail.size() + 1 && std::string_view(value).substr(value.size() - tail.size()) == tail &&
             (value[value.size() - tail.size() - 1] == '/' || value[value.size() - tail.size() - 1] == '.');
    };
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (!ours(Attr(args[i], "value"), Attr(args[i + 1], "value"))) continue;
      for (xmlNode* a : {args[i], args[i + 1]}) {
        xmlUnlinkNode(a);
        xmlFreeNode(a);
      }
      ++dropped;
      ++i;
    }
  }
  return dropped;
}

void DomainXml::AddQemuArgs(const std::vector<std::string>& args) {
  xmlNode* root = doc_->root();
  xmlNsPtr ns = xmlSearchNsByHref(doc_->doc, root, X(kQemuNamespace));
  if (ns == nullptr) ns = xmlNewNs(root, X(kQemuNamespace), X("qemu"));
  xmlNode* cmdline = nullptr;
  for (xmlNode* c = root->children; c; c = c->next) {
    if (c->type == XML_ELEMENT_NODE && c->ns == ns && xmlStrcmp(c->name, X("commandline")) == 0) cmdline = c;
  }
  if (cmdline == nullptr) cmdline = xmlNewChild(root, ns, X("commandline"), nullptr);
  for (const std::string& a : args) {
    xmlNode* arg = xmlNewChild(cmdline, ns, X("arg"), nullptr);
    xmlSetProp(arg, X("value"), X(a.c_str()));
  }
}

}  // namespace halite::libvirt
