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

std::vector<std::string> DomainXml::SuffixCharDeviceFiles(const std::string& suffix) {
  std::vector<std::string> out;
  xmlNode* devices = Child(doc_->root(), "devices");
  for (const char* kind : {"serial", "console", "channel", "parallel"}) {
    for (xmlNode* d : Children(devices, kind)) {
      if (Attr(d, "type") != "file") continue;
      xmlNode* src = Child(d, "source");
      const std::string path = Attr(src, "path");
      if (path.empty()) continue;
      const std::string renamed = path + "." + suffix;
      xmlSetProp(src, X("path"), X(renamed.c_str()));
      out.push_back(renamed);
    }
  }
  return out;
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
      const std::string_view tail = "/qmp.sock,server=on,wait=off";
      return flag == "-qmp" && value.rfind("unix:", 0) == 0 && value.find("/hlt-libvirt-") != std::string::npos &&
             value.size() > tail.size() && std::string_view(value).substr(value.size() - tail.size()) == tail;
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
