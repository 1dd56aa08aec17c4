// The RAM directory server over FUSE's low-level API (ram_dir_server.h).
#define FUSE_USE_VERSION 312
#include "halite/image_server/ram_dir_server.h"
#include "fuse_mount.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <vector>

namespace halite::image_server {
namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;  // 1
constexpr fuse_ino_t kRegistryIno = 2;
// The memory backend alias of a pc or q35 machine's main RAM: libvirt's file name for it.
constexpr const char* kMainRamAlias = "pc.ram";

struct Node {
  fuse_ino_t parent = 0;
  mode_t mode = 0;  // S_IFDIR or S_IFLNK plus permissions
  uid_t uid = 0;
  gid_t gid = 0;
  timespec mtime{};
  std::string target;                         // a symlink's
  std::map<std::string, fuse_ino_t> entries;  // a directory's
};

timespec Now() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return t;
}

// "<digits>-<rest>": libvirt's per-domain directory (its id, then the short name). The short name, else "".
std::string ShortNameOfDomainDir(const std::string& name) {
  size_t i = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == 0 || i >= name.size() || name[i] != '-' || i + 1 == name.size()) return "";
  return name.substr(i + 1);
}

}  // namespace

std::string LibvirtShortName(const std::string& name) { return name.substr(0, kLibvirtShortNameBytes); }

class RamDirServer::Impl {
 public:
  explicit Impl(RamDirServerOptions options) : options_(std::move(options)) {}
  ~Impl() { Shutdown(); }

  Status Start() {
    struct stat under;
    if (stat(options_.mountpoint.c_str(), &under) != 0) {
      return Status::IoError(options_.mountpoint + ": cannot mount the RAM directory server there", errno);
    }
    // The root looks like the directory it covers (libvirt's, possibly owned by the session daemon's user).
    Node& root = nodes_[kRootIno];
    root.parent = kRootIno;
    root.mode = S_IFDIR | (under.st_mode & 07777);
    root.uid = under.st_uid;
    root.gid = under.st_gid;
    root.mtime = Now();
    root.entries[kRamDirRegistry] = kRegistryIno;
    Node& registry = nodes_[kRegistryIno];
    registry.parent = kRootIno;
    registry.mode = S_IFDIR | 0755;
    registry.uid = getuid();
    registry.gid = getgid();
    registry.mtime = root.mtime;

    std::vector<std::string> fuse_options = {"fsname=halite-ramdir", "subtype=halite-ramdir", "default_permissions"};
    if (options_.allow_other) fuse_options.push_back("allow_other");
    fuse_lowlevel_ops ops{};
    ops.lookup = &Impl::OnLookup;
    ops.getattr = &Impl::OnGetattr;
    ops.setattr = &Impl::OnSetattr;
    ops.readlink = &Impl::OnReadlink;
    ops.mkdir = &Impl::OnMkdir;
    ops.rmdir = &Impl::OnRmdir;
    ops.unlink = &Impl::OnUnlink;
    ops.symlink = &Impl::OnSymlink;
    ops.mknod = &Impl::OnMknod;
    ops.create = &Impl::OnCreate;
    ops.link = &Impl::OnLink;
    ops.rename = &Impl::OnRename;
    ops.open = &Impl::OnOpen;
    ops.opendir = &Impl::OnOpendir;
    ops.readdir = &Impl::OnReaddir;
    HLT_RETURN_IF_ERROR(mount_.Mount(fuse_options, ops, this, options_.mountpoint, "the RAM directory server", 4));
    return Status::Ok();
  }

  RamDirCounts Counts() const {
    std::lock_guard<std::mutex> lock(mu_);
    RamDirCounts c;
    c.registrations = nodes_.at(kRegistryIno).entries.size();
    for (const auto& [ino, node] : nodes_) {
      if (ino != kRootIno && ino != kRegistryIno && S_ISDIR(node.mode)) c.directories++;
    }
    c.links_made = links_made_;
    c.refused = refused_;
    return c;
  }

  bool Idle() const {
    const RamDirCounts c = Counts();
    return c.registrations == 0 && c.directories == 0;
  }

  bool Serving() const { return mount_.Serving(); }
  void Wait() { mount_.Wait(); }
  void Shutdown() { mount_.Unmount(); }

 private:
  static Impl* Self(fuse_req_t req) { return static_cast<Impl*>(fuse_req_userdata(req)); }

  // Callers hold mu_.
  void FillAttr(fuse_ino_t ino, const Node& n, struct stat* st) const {
    std::memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_mode = n.mode;
    st->st_nlink = S_ISDIR(n.mode) ? 2 : 1;
    st->st_uid = n.uid;
    st->st_gid = n.gid;
    st->st_size = S_ISLNK(n.mode) ? static_cast<off_t>(n.target.size()) : 0;
    st->st_mtim = st->st_ctim = st->st_atim = n.mtime;
  }

  // Nothing is cached by the kernel: every lookup comes here, so a registration counts from the moment it is made.
  void ReplyEntry(fuse_req_t req, fuse_ino_t ino, const Node& n) const {
    fuse_entry_param e{};
    e.ino = ino;
    e.generation = 1;
    FillAttr(ino, n, &e.attr);
    fuse_reply_entry(req, &e);
  }

  fuse_ino_t AddNode(fuse_ino_t parent, const std::string& name, Node node) {
    const fuse_ino_t ino = next_ino_++;
    node.parent = parent;
    node.mtime = Now();
    nodes_[ino] = std::move(node);
    Node& p = nodes_[parent];
    p.entries[name] = ino;
    p.mtime = Now();
    return ino;
  }

  void RemoveEntry(fuse_ino_t parent, const std::string& name, fuse_ino_t ino) {
    Node& p = nodes_[parent];
    p.entries.erase(name);
    p.mtime = Now();
    nodes_.erase(ino);
  }

  static void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    auto p = self->nodes_.find(parent);
    if (p == self->nodes_.end() || !S_ISDIR(p->second.mode)) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (auto e = p->second.entries.find(name); e != p->second.entries.end()) {
      self->ReplyEntry(req, e->second, self->nodes_.at(e->second));
      return;
    }
    // QEMU asking for the main RAM's file of a domain hlt-restore registered: the registered image.
    if (parent != kRootIno && parent != kRegistryIno && p->second.parent == kRootIno &&
        std::strcmp(name, kMainRamAlias) == 0) {
      std::string dir_name;
      for (const auto& [n, ino] : self->nodes_.at(kRootIno).entries) {
        if (ino == parent) dir_name = n;
      }
      const std::string short_name = ShortNameOfDomainDir(dir_name);
      const Node& registry = self->nodes_.at(kRegistryIno);
      if (auto r = registry.entries.find(short_name); !short_name.empty() && r != registry.entries.end()) {
        Node link;
        link.mode = S_IFLNK | 0777;
        link.uid = p->second.uid;
        link.gid = p->second.gid;
        link.target = self->nodes_.at(r->second).target;
        const fuse_ino_t ino = self->AddNode(parent, name, std::move(link));
        self->links_made_++;
        self->ReplyEntry(req, ino, self->nodes_.at(ino));
        return;
      }
    }
    fuse_reply_err(req, ENOENT);
  }

  static void OnGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    auto n = self->nodes_.find(ino);
    if (n == self->nodes_.end()) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    struct stat st;
    self->FillAttr(ino, n->second, &st);
    fuse_reply_attr(req, &st, 0);
  }

  // chown and chmod (libvirt's labelling of the domain directory) and times are remembered; a size is refused.
  static void OnSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    auto it = self->nodes_.find(ino);
    if (it == self->nodes_.end()) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (to_set & FUSE_SET_ATTR_SIZE) {
      self->refused_++;
      fuse_reply_err(req, EROFS);
      return;
    }
    Node& n = it->second;
    if (to_set & FUSE_SET_ATTR_MODE) n.mode = (n.mode & S_IFMT) | (attr->st_mode & 07777);
    if (to_set & FUSE_SET_ATTR_UID) n.uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) n.gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_MTIME) n.mtime = attr->st_mtim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) n.mtime = Now();
    struct stat st;
    self->FillAttr(ino, n, &st);
    fuse_reply_attr(req, &st, 0);
  }

  static void OnReadlink(fuse_req_t req, fuse_ino_t ino) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    auto n = self->nodes_.find(ino);
    if (n == self->nodes_.end() || !S_ISLNK(n->second.mode)) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    fuse_reply_readlink(req, n->second.target.c_str());
  }

  static void OnMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    auto p = self->nodes_.find(parent);
    // Directories anywhere but in the registry (libvirt makes RAMDIR/<id>-<name>; mkdir -p may make more).
    if (p == self->nodes_.end() || !S_ISDIR(p->second.mode) || parent == kRegistryIno) {
      self->refused_++;
      fuse_reply_err(req, parent == kRegistryIno ? EPERM : ENOENT);
      return;
    }
    if (p->second.entries.count(name)) {
      fuse_reply_err(req, EEXIST);
      return;
    }
    self->AddAndReply(req, parent, name, S_IFDIR | (mode & 07777 & ~fuse_req_ctx(req)->umask));
  }

  static void OnRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    fuse_ino_t ino = 0;
    int err = self->FindEntry(parent, name, &ino);
    if (err == 0 && ino == kRegistryIno) err = EBUSY;
    if (err == 0 && !S_ISDIR(self->nodes_.at(ino).mode)) err = ENOTDIR;
    if (err == 0 && !self->nodes_.at(ino).entries.empty()) err = ENOTEMPTY;
    if (err == 0) self->RemoveEntry(parent, name, ino);
    fuse_reply_err(req, err);
  }

  static void OnUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    fuse_ino_t ino = 0;
    int err = self->FindEntry(parent, name, &ino);
    if (err == 0 && S_ISDIR(self->nodes_.at(ino).mode)) err = EISDIR;
    if (err == 0) self->RemoveEntry(parent, name, ino);
    fuse_reply_err(req, err);
  }

  // The inode of `name` in directory `parent`: 0, or ENOENT when either is missing. With mu_ held.
  int FindEntry(fuse_ino_t parent, const char* name, fuse_ino_t* ino) const {
    auto p = nodes_.find(parent);
    if (p == nodes_.end()) return ENOENT;
    auto e = p->second.entries.find(name);
    if (e == p->second.entries.end()) return ENOENT;
    *ino = e->second;
    return 0;
  }

  // A node of `mode` owned by the caller of `req`, added to `parent` as `name`, and the reply. With mu_ held.
  void AddAndReply(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, std::string target = {}) {
    const fuse_ctx* ctx = fuse_req_ctx(req);
    Node node;
    node.mode = mode;
    node.uid = ctx->uid;
    node.gid = ctx->gid;
    node.target = std::move(target);
    const fuse_ino_t ino = AddNode(parent, name, std::move(node));
    ReplyEntry(req, ino, nodes_.at(ino));
  }

  // Symlinks only in the registry: a registration.
  static void OnSymlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    if (parent != kRegistryIno || target[0] != '/' || std::strlen(name) > kLibvirtShortNameBytes) {
      self->refused_++;
      fuse_reply_err(req, parent != kRegistryIno ? EROFS : EINVAL);
      return;
    }
    if (self->nodes_.at(kRegistryIno).entries.count(name)) {
      fuse_reply_err(req, EEXIST);
      return;
    }
    self->AddAndReply(req, parent, name, S_IFLNK | 0777, target);
  }

  static void Refuse(fuse_req_t req) {
    Impl* self = Self(req);
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->refused_++;
    }
    fuse_reply_err(req, EROFS);
  }
  static void OnMknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { Refuse(req); }
  static void OnCreate(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { Refuse(req); }
  static void OnLink(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { Refuse(req); }
  static void OnRename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned int) {
    Refuse(req);
  }
  // Only directories and symlinks exist: an open reaches here only for a directory opened as a file.
  static void OnOpen(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, EISDIR); }

  static void OnOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    auto n = self->nodes_.find(ino);
    if (n == self->nodes_.end() || !S_ISDIR(n->second.mode)) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    fuse_reply_open(req, fi);
  }

  static void OnReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    Impl* self = Self(req);
    std::lock_guard<std::mutex> lock(self->mu_);
    auto n = self->nodes_.find(ino);
    if (n == self->nodes_.end() || !S_ISDIR(n->second.mode)) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    std::vector<std::pair<std::string, fuse_ino_t>> entries = {{".", ino}, {"..", n->second.parent}};
    for (const auto& e : n->second.entries) entries.push_back(e);
    std::vector<char> buf(size);
    size_t used = 0;
    for (size_t i = static_cast<size_t>(off); i < entries.size(); ++i) {
      struct stat st{};
      st.st_ino = entries[i].second;
      auto target = self->nodes_.find(entries[i].second);
      st.st_mode = target == self->nodes_.end() ? S_IFDIR : target->second.mode;
      const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, entries[i].first.c_str(), &st,
                                            static_cast<off_t>(i + 1));
      if (need > size - used) break;
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  RamDirServerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<fuse_ino_t, Node> nodes_;
  fuse_ino_t next_ino_ = kRegistryIno + 1;  // never reused: a forgotten inode stays unknown
  uint64_t links_made_ = 0;
  uint64_t refused_ = 0;
  FuseMount mount_;
};

Result<std::unique_ptr<RamDirServer>> RamDirServer::Start(RamDirServerOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  HLT_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<RamDirServer>(new RamDirServer(std::move(impl)));
}

RamDirServer::RamDirServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RamDirServer::~RamDirServer() = default;
RamDirCounts RamDirServer::Counts() const { return impl_->Counts(); }
bool RamDirServer::Idle() const { return impl_->Idle(); }
void RamDirServer::Stop() { impl_->Shutdown(); }
void RamDirServer::Wait() { impl_->Wait(); }
bool RamDirServer::Serving() const { return impl_->Serving(); }

}  // namespace halite::image_server
