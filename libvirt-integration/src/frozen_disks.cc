#include "frozen_disks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libvirt/libvirt.h>

#include <cerrno>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "halite/qemu/qemu_img.h"
#include "halite/streaming_hash.h"


namespace halite::libvirt {
namespace {

// The characters of a path that go into a snapshot XML attribute.
std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&apos;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

Status Fingerprint(const std::string& path, uint64_t* size, std::string* xxh3_128_hex) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot open the disk image", errno);
  StreamingHash128 hash;
  std::vector<uint8_t> buf(4 << 20);
  uint64_t total = 0;
  Status s;
  for (;;) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = Status::IoError(fmt::format("{}: read at offset {:#x} failed", path, total), errno);
      break;
    }
    if (n == 0) break;
    hash.Update(std::span(buf.data(), size_t(n)));
    total += uint64_t(n);
  }
  close(fd);
  HLT_RETURN_IF_ERROR(s);
  *size = total;
  *xxh3_128_hex = hash.Digest().Hex();
  return Status::Ok();
}

Status FreezeDisks(const Domain& domain, const DomainXml& xml, const std::vector<WritableDisk>& disks,
                   const std::string& tag, std::vector<FrozenDisk>* frozen, std::vector<std::string>* overlays) {
  if (disks.empty()) return Status::Ok();
  std::string snapshot = "<domainsnapshot><description>libhalite checkpoint " + XmlEscape(tag) +
                         "</description><disks>";
  std::vector<std::string> planned;
  for (const std::string& target : xml.DiskTargets()) {
    const WritableDisk* w = nullptr;
    for (const auto& d : disks) {
      if (d.target == target) w = &d;
    }
    if (w == nullptr) {
      snapshot += "<disk name='" + XmlEscape(target) + "' snapshot='no'/>";
      continue;
    }
    const std::string overlay = w->source + "." + tag + ".qcow2";
    struct stat st;
    if (stat(overlay.c_str(), &st) == 0) {
      return Status::InvalidArgument(overlay + ": exists already (the overlay the domain would go on to)");
    }
    planned.push_back(overlay);
    snapshot += "<disk name='" + XmlEscape(target) + "' snapshot='external'><driver type='qcow2'/><source file='" +
                XmlEscape(overlay) + "'/></disk>";
  }
  snapshot += "</disks></domainsnapshot>";
  const unsigned flags = VIR_DOMAIN_SNAPSHOT_CREATE_DISK_ONLY | VIR_DOMAIN_SNAPSHOT_CREATE_NO_METADATA |
                         VIR_DOMAIN_SNAPSHOT_CREATE_ATOMIC;
  virDomainSnapshotPtr snap = virDomainSnapshotCreateXML(domain.get(), snapshot.c_str(), flags);
  if (snap == nullptr) return LastError("libvirt: freezing the disks of domain " + domain.name());
  virDomainSnapshotFree(snap);
  *overlays = planned;
  for (const auto& d : disks) {
    FrozenDisk f{d.target, d.source, d.format, 0, ""};
    HLT_RETURN_IF_ERROR(Fingerprint(d.source, &f.size, &f.xxh3_128));
    frozen->push_back(std::move(f));
  }
  return Status::Ok();
}

std::string EncodeFrozenDisks(const std::vector<FrozenDisk>& disks) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& d : disks) {
    j.push_back({{"target", d.target}, {"path", d.path}, {"format", d.format}, {"size", d.size},
                 {"xxh3_128", d.xxh3_128}});
  }
  return j.dump(2);
}

Result<std::vector<FrozenDisk>> DecodeFrozenDisks(const std::string& text, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return Status::Corrupt(what + ": expected a JSON array of disks");
  std::vector<FrozenDisk> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    auto str = [&](const char* k) -> const std::string* {
      return e.is_object() && e.contains(k) && e[k].is_string() ? e[k].get_ptr<const std::string*>() : nullptr;
    };
    const std::string *target = str("target"), *path = str("path"), *format = str("format"), *hash = str("xxh3_128");
    if (!target || !path || !format || !hash || !e.contains("size") || !e["size"].is_number_unsigned() ||
        path->empty() || (*path)[0] != '/') {
      return Status::Corrupt(fmt::format("{}: disk {}: expected target, absolute path, format, size and xxh3_128",
                                         what, i));
    }
    out.push_back(FrozenDisk{*target, *path, *format, e["size"].get<uint64_t>(), *hash});
  }
  return out;
}

Status CreateOverlay(const std::string& base, const std::string& format, const std::string& overlay) {
  struct stat st;
  // qemu-img would replace it without a word.
  if (stat(overlay.c_str(), &st) == 0) return Status::InvalidArgument(overlay + ": exists already (a disk overlay)");
  return qemu::RunQemuImg({"create", "-q", "-f", "qcow2", "-b", base, "-F", format, overlay});
}

}  // namespace halite::libvirt
