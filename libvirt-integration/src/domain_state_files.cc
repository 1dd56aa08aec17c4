// NVRAM and TPM state of a libvirt domain in its checkpoint (domain_state_files.h).
#include "domain_state_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>

#include <fmt/format.h>

#include "qemu_process_lookup.h"

namespace halite::libvirt {
namespace {

// A file's whole content, at most `max` bytes (a larger one is refused, naming it).
Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path, uint64_t max, const std::string& what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(what + " " + path + ": cannot open it", errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::IoError(what + " " + path + ": not a regular file");
  }
  if (uint64_t(st.st_size) > max) {
    close(fd);
    return Status::InvalidArgument(fmt::format("{} {}: {} bytes, more than the {} a checkpoint keeps", what, path,
                                               st.st_size, max));
  }
  std::vector<uint8_t> bytes(size_t(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = pread(fd, bytes.data() + done, bytes.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      close(fd);
      return Status::IoError(fmt::format("{} {}: read at offset {:#x} failed", what, path, done), e);
    }
    done += size_t(n);
  }
  close(fd);
  return bytes;
}

// A name a checkpoint may give a file of the TPM's state directory: no path, nothing hidden.
bool PlainFileName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return false;
  }
  return true;
}

// The state directory on the command line of the swtpm libvirt started for domain `uuid`:
// `swtpm socket ... --tpmstate dir=STORAGE/UUID/tpm2,mode=0600 ...`.
Result<std::string> SwtpmStateDir(const std::string& uuid) {
  const std::string key = "/" + uuid + "/tpm";
  std::string found;
  auto pid = FindProcessByArguments(
      [&](const std::vector<std::string>& args) {
        if (args.empty() || args[0].size() < 5 || args[0].compare(args[0].size() - 5, 5, "swtpm") != 0) return false;
        for (size_t i = 0; i + 1 < args.size(); ++i) {
          const std::string& v = args[i + 1];
          if (args[i] != "--tpmstate" || v.rfind("dir=", 0) != 0 || v.find(key) == std::string::npos) continue;
          found = v.substr(4, v.find(',') == std::string::npos ? std::string::npos : v.find(',') - 4);
          return true;
        }
        return false;
      },
      "swtpm --tpmstate dir=..." + key + "...");
  if (!pid && pid.error().code() != StatusCode::kNotFound) {
    return Status(pid.error().code(), "the domain's TPM state cannot be saved: " + pid.error().message());
  }
  if (!pid) {
    return Status::NotFound("the domain has an emulated TPM, but no swtpm process with its state directory (" +
                            key.substr(1) + ") runs on this host: its TPM state cannot be saved with it (" +
                            pid.error().message() + ")");
  }
  return found;
}

}  // namespace

Result<DomainStateFiles> LocateDomainStateFiles(const DomainXml& xml, const std::string& uuid) {
  DomainStateFiles out;
  out.nvram_path = xml.NvramPath();
  out.tpm_version = xml.TpmEmulatorVersion();
  if (out.tpm_version.empty()) return out;
  HLT_ASSIGN_OR_RETURN(out.tpm_dir, SwtpmStateDir(uuid));
  return out;
}

Status ReadDomainStateFiles(DomainStateFiles* files) {
  DomainStateFiles& out = *files;
  out.nvram.clear();
  out.tpm_files.clear();
  if (!out.nvram_path.empty()) {
    HLT_ASSIGN_OR_RETURN(out.nvram, ReadWholeFile(out.nvram_path, kMaxNvramBytes, "NVRAM"));
  }
  if (out.tpm_dir.empty()) return Status::Ok();
  DIR* d = opendir(out.tpm_dir.c_str());
  if (d == nullptr) return Status::IoError("TPM state directory " + out.tpm_dir + ": cannot list it", errno);
  std::vector<std::string> names;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == ".lock") continue;  // swtpm's lock is its own, held while it runs
    names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  if (names.size() > kMaxTpmFiles) {
    return Status::InvalidArgument(fmt::format("TPM state directory {}: {} files, more than the {} a checkpoint keeps",
                                               out.tpm_dir, names.size(), kMaxTpmFiles));
  }
  for (const std::string& name : names) {
    if (!PlainFileName(name)) {
      return Status::InvalidArgument("TPM state directory " + out.tpm_dir + ": unexpected entry \"" + name + "\"");
    }
    HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                         ReadWholeFile(out.tpm_dir + "/" + name, kMaxTpmFileBytes, "TPM state file"));
    out.tpm_files.push_back(StateFile{name, std::move(bytes)});
  }
  return Status::Ok();
}

Status AddDomainStateBlobs(CheckpointWriter& writer, const DomainStateFiles& files) {
  if (!files.nvram_path.empty()) HLT_RETURN_IF_ERROR(writer.AddBlob(kNvramBlobName, files.nvram));
  for (const StateFile& f : files.tpm_files) HLT_RETURN_IF_ERROR(writer.AddBlob(kTpmBlobPrefix + f.name, f.bytes));
  return Status::Ok();
}

Result<DomainStateFiles> ReadDomainStateBlobs(const CheckpointReader& reader) {
  DomainStateFiles out;
  const std::string prefix = kTpmBlobPrefix;
  for (const BlobInfo& b : reader.blobs()) {
    const bool nvram = b.name == kNvramBlobName;
    const bool tpm = b.name.rfind(prefix, 0) == 0;
    if (!nvram && !tpm) continue;
    const uint64_t max = nvram ? kMaxNvramBytes : kMaxTpmFileBytes;
    if (b.raw_length > max) {
      return Status::Corrupt(fmt::format("{}: blob {}: {} bytes, more than the {} expected", reader.name(), b.name,
                                         b.raw_length, max));
    }
    const std::string name = b.name.substr(tpm ? prefix.size() : 0);
    if (tpm && (!PlainFileName(name) || out.tpm_files.size() >= kMaxTpmFiles)) {
      return Status::Corrupt(reader.name() + ": blob " + b.name + ": not a TPM state file name, or one too many");
    }
    HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, reader.ReadBlob(std::string_view(b.name)));
    if (nvram) {
      out.nvram_path = "(checkpoint)";
      out.nvram = std::move(bytes);
    } else {
      out.tpm_files.push_back(StateFile{name, std::move(bytes)});
    }
  }
  return out;
}

std::string TpmStatePath(const std::string& storage_dir, const std::string& uuid, const std::string& version) {
  return storage_dir + "/" + uuid + "/" + (version == "1.2" ? "tpm1.2" : "tpm2");
}

Status WriteNewFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) return Status::InvalidArgument(path + ": exists already");
  if (fd < 0) return Status::IoError(path + ": cannot create it", errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      unlink(path.c_str());
      return Status::IoError(fmt::format("{}: write at offset {:#x} failed", path, done), e);
    }
    done += size_t(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    unlink(path.c_str());
    return Status::IoError(path + ": cannot sync it", errno);
  }
  return Status::Ok();
}

Status InstallTpmState(const std::vector<StateFile>& files, const std::string& state_path) {
  std::error_code ec;
  const std::filesystem::path state(state_path);
  // Who may own what we make: a privileged libvirt gives the state to its swtpm user itself, but a session
  // instance cannot (it runs swtpm as its own user), so what a root hlt-restore makes goes to the owner of the
  // nearest directory that exists above it (the session user's ~/.config/libvirt/...).
  std::filesystem::path above = state.parent_path().parent_path();
  struct stat owner {};
  while (!above.empty() && stat(above.c_str(), &owner) != 0) above = above.parent_path();
  std::vector<std::string> made;
  // libvirt makes its storage directory and the UUID's 0711 (its swtpm user must get through), the state
  // directory 0700.
  for (const auto& [dir, mode] : {std::pair{state.parent_path().parent_path(), 0711},
                                  std::pair{state.parent_path(), 0711}, std::pair{state, 0700}}) {
    if (std::filesystem::create_directory(dir, ec)) made.push_back(dir.string());
    if (ec) return Status::IoError(dir.string() + ": cannot create the TPM state's directory", ec.value());
    chmod(dir.c_str(), mode_t(mode));
  }
  for (const StateFile& f : files) {
    const std::string path = state_path + "/" + f.name;
    unlink(path.c_str());
    HLT_RETURN_IF_ERROR(WriteNewFile(path, f.bytes));
    made.push_back(path);
  }
  if (geteuid() == 0 && !above.empty() && owner.st_uid != 0) {
    for (const std::string& path : made) {
      if (chown(path.c_str(), owner.st_uid, owner.st_gid) != 0) {
        return Status::IoError(fmt::format("{}: cannot give it to uid {} (the owner of {})", path, owner.st_uid,
                                           above.string()),
                               errno);
      }
    }
  }
  return Status::Ok();
}

}  // namespace halite::libvirt
