#include "frozen_disks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
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

Result<DiskFreeze> PrepareDiskFreeze(const Domain& domain, const DomainXml& xml, const std::vector<WritableDisk>& disks,
                                     const std::string& tag) {
  DiskFreeze freeze;
  freeze.disks = disks;
  if (disks.empty()) return freeze;
  std::string snapshot = "<domainsnapshot><description>libhalite checkpoint " + XmlEscape(tag) +
                         "</description><disks>";
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
    snapshot += "<disk name='" + XmlEscape(target) + "' snapshot='external'><driver type='qcow2'/><source file='" +
                XmlEscape(overlay) + "'/></disk>";
  }
  freeze.snapshot_xml = snapshot + "</disks></domainsnapshot>";
  for (const auto& d : disks) {
    const std::string overlay = d.source + "." + tag + ".qcow2";
    struct stat st;
    if (stat(overlay.c_str(), &st) == 0) {
      return Status::InvalidArgument(overlay + ": exists already (the overlay the domain would go on to)");
    }
  }
  for (const auto& d : disks) {
    const std::string overlay = d.source + "." + tag + ".qcow2";
    virDomainBlockInfo info{};
    struct stat image;
    Status s;
    if (virDomainGetBlockInfo(domain.get(), d.target.c_str(), &info, 0) < 0) {
      s = LastError("libvirt: the size of disk " + d.target + " of domain " + domain.name());
    } else if (stat(d.source.c_str(), &image) != 0) {
      s = Status::IoError(d.source + ": cannot stat the disk image", errno);
    } else {
      // -u: the image is in use by QEMU, which does not share it for writing; the size says all qemu-img needs.
      s = qemu::RunQemuImg({"create", "-q", "-f", "qcow2", "-u", "-b", d.source, "-F", d.format, overlay,
                            std::to_string(info.capacity)});
      if (s.ok()) freeze.overlays.push_back(overlay);
      if (s.ok() && (chown(overlay.c_str(), image.st_uid, image.st_gid) != 0 ||
                     chmod(overlay.c_str(), image.st_mode & 0666) != 0)) {
        s = Status::IoError(overlay + ": cannot give it the owner and mode of " + d.source, errno);
      }
    }
    if (!s.ok()) {
      for (const std::string& o : freeze.overlays) unlink(o.c_str());
      return s;
    }
  }
  return freeze;
}

Status FreezeDisks(const Domain& domain, DiskFreeze* freeze) {
  if (freeze->disks.empty()) return Status::Ok();
  const unsigned flags = VIR_DOMAIN_SNAPSHOT_CREATE_DISK_ONLY | VIR_DOMAIN_SNAPSHOT_CREATE_NO_METADATA |
                         VIR_DOMAIN_SNAPSHOT_CREATE_ATOMIC | VIR_DOMAIN_SNAPSHOT_CREATE_REUSE_EXT;
  virDomainSnapshotPtr snap = virDomainSnapshotCreateXML(domain.get(), freeze->snapshot_xml.c_str(), flags);
  if (snap == nullptr) return LastError("libvirt: freezing the disks of domain " + domain.name());
  virDomainSnapshotFree(snap);
  freeze->frozen = true;
  return Status::Ok();
}

Result<std::vector<FrozenDisk>> FingerprintFrozenDisks(const DiskFreeze& freeze) {
  std::vector<FrozenDisk> out;
  for (const auto& d : freeze.disks) {
    FrozenDisk f{d.target, d.source, d.format, 0, ""};
    HLT_RETURN_IF_ERROR(Fingerprint(d.source, &f.size, &f.xxh3_128));
    out.push_back(std::move(f));
  }
  return out;
}

namespace {

// The domain's disk `target` back from its overlay onto the image below it: an active commit of the overlay into
// that image (SHALLOW: never further down its chain), then the pivot once the commit has caught up (libvirt
// refuses it before: VIR_ERR_BLOCK_COPY_ACTIVE), after which libvirt deletes the overlay (DELETE).
Status CommitBack(const Domain& domain, const std::string& target, std::chrono::steady_clock::time_point deadline) {
  const std::string what = "disk " + target + " of domain " + domain.name();
  const unsigned flags = VIR_DOMAIN_BLOCK_COMMIT_ACTIVE | VIR_DOMAIN_BLOCK_COMMIT_SHALLOW |
                         VIR_DOMAIN_BLOCK_COMMIT_DELETE;
  if (virDomainBlockCommit(domain.get(), target.c_str(), nullptr, nullptr, 0, flags) < 0) {
    return LastError("libvirt: committing " + what + " back into its image");
  }
  for (;;) {
    if (virDomainBlockJobAbort(domain.get(), target.c_str(), VIR_DOMAIN_BLOCK_JOB_ABORT_PIVOT) == 0) {
      return Status::Ok();
    }
    virErrorPtr e = virGetLastError();
    if (e == nullptr || e->code != VIR_ERR_BLOCK_COPY_ACTIVE || std::chrono::steady_clock::now() > deadline) {
      Status s = LastError("libvirt: moving " + what + " back onto its image");
      (void)virDomainBlockJobAbort(domain.get(), target.c_str(), 0);
      return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

Status UndoDiskFreeze(const Domain& domain, DiskFreeze* freeze, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string left;
  for (size_t i = 0; i < freeze->overlays.size(); ++i) {
    const std::string& overlay = freeze->overlays[i];
    if (freeze->frozen) {
      if (Status s = CommitBack(domain, freeze->disks[i].target, deadline); !s.ok()) {
        left += (left.empty() ? "" : "; ") + overlay + " (the domain still runs on it: " + s.message() + ")";
        continue;
      }
    }
    if (unlink(overlay.c_str()) != 0 && errno != ENOENT) {
      left += (left.empty() ? "" : "; ") + overlay + " (cannot remove it: " + strerror(errno) + ")";
    }
  }
  freeze->frozen = false;
  freeze->overlays.clear();
  if (!left.empty()) return Status::IoError("left behind: " + left);
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
