// The RAM directory server mounted for real (FUSE): what libvirt does in its memory backing directory (mkdir,
// chown, chmod, readdir, unlink, rmdir) works; QEMU's open of pc.ram in a registered domain's directory follows a
// symlink to the registered image; everything else that would make a file is refused.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "halite/image_server/ram_dir_server.h"
#include "support/temp_dir.h"

using namespace halite;
using namespace halite::image_server;

namespace {

struct Mounted {
  halite::testing::TempDir dir;  // destroyed after the server (members go in reverse order)
  std::string mountpoint;
  std::unique_ptr<RamDirServer> server;
  std::string Path(const std::string& name) const { return mountpoint + "/" + name; }
};

std::unique_ptr<Mounted> Mount() {
  auto m = std::make_unique<Mounted>();
  m->mountpoint = m->dir.File("ram");
  REQUIRE(::mkdir(m->mountpoint.c_str(), 0751) == 0);
  auto s = RamDirServer::Start({m->mountpoint, true});
  if (!s) {
    std::printf("SKIP: cannot mount a FUSE file system here (%s): the RAM directory server's tests need /dev/fuse "
                "and the right to mount (root, or fuse3's fusermount3)\n",
                s.error().ToString().c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
  m->server = std::move(*s);
  return m;
}

std::string ReadLink(const std::string& path) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n < 0 ? "" : std::string(buf, size_t(n));
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool MountedAs(const std::string& mountpoint, const std::string& fstype) {
  std::string line;
  std::ifstream mi("/proc/self/mountinfo");
  while (std::getline(mi, line)) {
    if (line.find(" " + mountpoint + " ") != std::string::npos && line.find(" - " + fstype + " ") != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("the RAM directory: libvirt's mkdir/chown/chmod, the registry, refused files", "[fuse]") {
  auto m = Mount();
  CHECK(MountedAs(m->mountpoint, kRamDirFsType));
  CHECK(halite::testing::ListDirectory(m->mountpoint) == std::vector<std::string>{".halite"});
  struct stat st;
  REQUIRE(::stat(m->mountpoint.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0751);  // the covered directory's mode
  CHECK(m->server->Idle());

  // libvirt before QEMU starts: mkdir -p RAMDIR/<id>-<short name>, then hands it to QEMU's user.
  const std::string dir = m->Path("7-desk-clone-0123456");
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  CHECK(::mkdir(dir.c_str(), 0700) == -1);
  CHECK(errno == EEXIST);
  REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
  REQUIRE(::chmod(dir.c_str(), 0750) == 0);
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 07777) == 0750);
  CHECK(st.st_uid == 65534);
  CHECK(st.st_gid == 65534);
  CHECK_FALSE(m->server->Idle());

  // Not registered: QEMU finds no file and may not create one.
  CHECK(::access((dir + "/pc.ram").c_str(), F_OK) == -1);
  int fd = ::open((dir + "/pc.ram").c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  CHECK(fd == -1);
  CHECK(errno == EROFS);
  CHECK(::mknod((dir + "/x").c_str(), S_IFREG | 0644, 0) == -1);
  CHECK(::symlink("/etc/hostname", (dir + "/pc.ram").c_str()) == -1);
  CHECK(errno == EROFS);
  CHECK(m->server->Counts().refused >= 3);

  // The image a registration points at (here an ordinary file).
  const std::string image = m->dir.File("ckpt.pc.ram");
  { std::ofstream(image) << "the checkpoint's memory"; }
  // The registry takes symlinks named by a short name (at most 20 bytes), nothing else.
  REQUIRE(::symlink(image.c_str(), m->Path(".halite/desk-clone-0123456").c_str()) == 0);
  CHECK(::symlink(image.c_str(), m->Path(".halite/desk-clone-0123456").c_str()) == -1);
  CHECK(errno == EEXIST);
  CHECK(::symlink(image.c_str(), m->Path(".halite/desk-clone-0123456789abcdef").c_str()) == -1);
  CHECK(errno == EINVAL);
  CHECK(::symlink("relative", m->Path(".halite/other").c_str()) == -1);
  CHECK(::mkdir(m->Path(".halite/sub").c_str(), 0755) == -1);
  CHECK(ReadLink(m->Path(".halite/desk-clone-0123456")) == image);
  CHECK(m->server->Counts().registrations == 1);

  // Registered: pc.ram in the domain's directory is a symlink to the image, which an open follows.
  REQUIRE(::lstat((dir + "/pc.ram").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(st.st_uid == 65534);  // the directory's owner
  CHECK(ReadLink(dir + "/pc.ram") == image);
  fd = ::open((dir + "/pc.ram").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  ::close(fd);
  CHECK(Slurp(dir + "/pc.ram") == "the checkpoint's memory");
  CHECK(m->server->Counts().links_made == 1);
  // Only the main RAM's alias, only in a <digits>-<name> directory.
  CHECK(::access((dir + "/other.ram").c_str(), F_OK) == -1);
  REQUIRE(::mkdir(m->Path("desk-clone-0123456").c_str(), 0700) == 0);
  CHECK(::access(m->Path("desk-clone-0123456/pc.ram").c_str(), F_OK) == -1);
  REQUIRE(::rmdir(m->Path("desk-clone-0123456").c_str()) == 0);

  // The entry keeps its target once the registration is gone (hlt-restore removes it once QEMU opened the file).
  REQUIRE(::unlink(m->Path(".halite/desk-clone-0123456").c_str()) == 0);
  CHECK(ReadLink(dir + "/pc.ram") == image);
  // Another domain with that short name is no longer served.
  REQUIRE(::mkdir(m->Path("8-desk-clone-0123456").c_str(), 0700) == 0);
  CHECK(::access(m->Path("8-desk-clone-0123456/pc.ram").c_str(), F_OK) == -1);
  REQUIRE(::rmdir(m->Path("8-desk-clone-0123456").c_str()) == 0);

  // libvirt after the domain stopped (virFileDeleteTree): list, unlink each entry, rmdir.
  CHECK(halite::testing::ListDirectory(dir) == std::vector<std::string>{"pc.ram"});
  CHECK(::rmdir(dir.c_str()) == -1);
  CHECK(errno == ENOTEMPTY);
  REQUIRE(::unlink((dir + "/pc.ram").c_str()) == 0);
  REQUIRE(::rmdir(dir.c_str()) == 0);
  CHECK(halite::testing::ListDirectory(m->mountpoint) == std::vector<std::string>{".halite"});
  CHECK(::rmdir(m->Path(".halite").c_str()) == -1);
  CHECK(m->server->Idle());
  CHECK(m->server->Counts().directories == 0);
}

TEST_CASE("the RAM directory unmounts on Stop", "[fuse]") {
  auto m = Mount();
  m->server->Stop();
  CHECK_FALSE(MountedAs(m->mountpoint, kRamDirFsType));
  CHECK(halite::testing::ListDirectory(m->mountpoint).empty());
}
