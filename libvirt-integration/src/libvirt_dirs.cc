// A local libvirt QEMU driver's directories (libvirt_dirs.h).
#include "halite/libvirt/libvirt_dirs.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>

namespace halite::libvirt {
namespace {

std::string QueryValue(const std::string& uri, const std::string& key) {
  const size_t q = uri.find('?');
  if (q == std::string::npos) return "";
  std::string query = uri.substr(q + 1);
  size_t at = 0;
  while (at <= query.size()) {
    const size_t amp = query.find('&', at);
    const std::string kv = query.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    if (kv.compare(0, key.size() + 1, key + "=") == 0) return kv.substr(key.size() + 1);
    if (amp == std::string::npos) break;
    at = amp + 1;
  }
  return "";
}

std::string UserConfigDir() {
  const char* xdg = getenv("XDG_CONFIG_HOME");
  if (xdg != nullptr && *xdg) return std::string(xdg) + "/libvirt";
  const char* home = getenv("HOME");
  return std::string(home ? home : "") + "/.config/libvirt";
}

}  // namespace

std::string LibvirtConfValue(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#' || line.compare(start, key.size(), key) != 0) continue;
    const size_t eq = line.find('=', start + key.size());
    if (eq == std::string::npos || line.find_first_not_of(" \t", start + key.size()) != eq) continue;
    const size_t q1 = line.find('"', eq);
    const size_t q2 = q1 == std::string::npos ? q1 : line.find('"', q1 + 1);
    if (q2 != std::string::npos) return line.substr(q1 + 1, q2 - q1 - 1);
  }
  return "";
}

Result<LibvirtDriverDirs> LocalLibvirtDriverDirs(const std::string& given_uri, const std::string& needed_for) {
  LibvirtDriverDirs dirs;
  std::string uri = given_uri;
  if (uri.empty()) {
    const char* env = getenv("LIBVIRT_DEFAULT_URI");
    uri = env != nullptr && *env ? env : (geteuid() == 0 ? "qemu:///system" : "qemu:///session");
  }
  dirs.uri = uri;
  const size_t scheme_end = uri.find("://");
  const std::string scheme = uri.substr(0, scheme_end);
  if (scheme_end == std::string::npos || (scheme != "qemu" && scheme != "qemu+unix")) {
    return Status::InvalidArgument(needed_for + ": the connection " + uri +
                                   " is not to this host's QEMU driver (qemu:// or qemu+unix://): run hlt-restore on "
                                   "the libvirt host");
  }
  const size_t path_start = uri.find('/', scheme_end + 3);
  if (path_start != scheme_end + 3) {
    return Status::InvalidArgument(needed_for + ": " + uri + " names another host; run hlt-restore on it");
  }
  const size_t query = uri.find('?');
  const std::string path = uri.substr(path_start, query == std::string::npos ? std::string::npos : query - path_start);
  if (path == "/embed") {
    const std::string root = QueryValue(uri, "root");
    if (root.empty()) return Status::InvalidArgument(uri + ": an embedded driver URI without root=");
    dirs.qemu_conf = root + "/etc/qemu.conf";
    dirs.ram_dir = root + "/lib/qemu/ram";
    dirs.swtpm_storage = root + "/lib/swtpm";
  } else if (path == "/system") {
    dirs.qemu_conf = "/etc/libvirt/qemu.conf";
    dirs.ram_dir = "/var/lib/libvirt/qemu/ram";
    dirs.swtpm_storage = "/var/lib/libvirt/swtpm";
  } else if (path == "/session") {
    dirs.qemu_conf = UserConfigDir() + "/qemu.conf";
    dirs.ram_dir = UserConfigDir() + "/qemu/ram";
    dirs.swtpm_storage = UserConfigDir() + "/qemu/swtpm";
  } else {
    return Status::InvalidArgument(needed_for + ": " + uri + ": expected /system, /session or /embed?root=DIR");
  }
  return dirs;
}

}  // namespace halite::libvirt
