// A libvirt domain restore with its servers, record and status file (libvirt_restore_session.h).
#include "halite/libvirt/libvirt_restore_session.h"

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "halite/checkpoint_location.h"
#include "halite/libvirt/libvirt_connection.h"
#include "halite/libvirt/libvirt_dirs.h"
#include "halite/image_server_process.h"
#include "halite/libvirt/restore_status_file.h"
#include "halite/qemu/qemu_restore_record.h"
#include "halite/restore_order_warmup.h"
#ifdef HALITE_LIBVIRT_WITH_IMAGE_SERVER
#include "halite/image_server/ram_dir_server.h"
#include "halite/libvirt/libvirt_ram_dir.h"
#include "halite/qemu/qemu_shared_memory.h"
#endif

namespace halite::libvirt {
namespace {

std::string HexId(const FileId& id) {
  std::string s;
  for (uint8_t b : id) s += fmt::format("{:02x}", b);
  return s;
}

void Say(const std::function<void(const std::string&)>& to, const std::string& line) {
  if (to) to(line);
}

// --resume DOMAIN: the record of the domain's QEMU must name this checkpoint; removed once the resume completed.
Status ResumeDomain(const DomainRestoreOptions& o, const Connection& conn, const CheckpointReader& reader,
                    StatusFile& status, LibvirtRestoreResult* result) {
  const std::string file_id = HexId(reader.file_id());
  const std::string& domain = o.resume_domain;
  LibvirtResumeOptions ro;
  ro.qemu = o.restore.qemu;
  std::string record_path;
  ro.check_qemu = [&](int pid) -> Status {
    record_path = qemu::RecordPathForPid(pid);
    HLT_ASSIGN_OR_RETURN(qemu::RestoreRecord prior, qemu::ReadRestoreRecord(record_path));
    auto started = qemu::ProcessStartTime(pid);
    if (!started || *started != prior.qemu_start_time) {
      return Status::InvalidArgument(record_path + " is the record of an earlier process with pid " +
                                     std::to_string(pid));
    }
    if (prior.file_id != file_id) {
      return Status::InvalidArgument(fmt::format("{} has file_id {}, but domain {} was being restored from {} "
                                                 "(file_id {}): resume with that checkpoint",
                                                 o.checkpoint, file_id, domain, prior.checkpoint, prior.file_id));
    }
    Say(o.on_notice, fmt::format("resuming the restore of {} into domain {} (QEMU pid {})", o.checkpoint, domain, pid));
    return Status::Ok();
  };
  ro.qemu.on_resumed = [&](uint64_t us) {
    status.Write("running", "resumed");
    if (o.restore.qemu.on_resumed) o.restore.qemu.on_resumed(us);
  };
  HLT_RETURN_IF_ERROR(ResumeLibvirtDomain(conn, reader, domain, ro, result));
  if (!record_path.empty()) unlink(record_path.c_str());
  status.SetDomain(domain, result->uuid);
  status.Write("completed", "resumed");
  return Status::Ok();
}

// Everything a --memory shared restore needs that lives as long as the restore: the registration of the domain's
// RAM file with the RAM directory server, removed once QEMU maps the image.
struct SharedMemoryState {
#ifdef HALITE_LIBVIRT_WITH_IMAGE_SERVER
  RamDirRegistration registration;
#endif
};

// --memory shared: the image server found or started, the domain's RAM a private file mapping that the RAM
// directory server resolves to the image, and a check that QEMU maps exactly that.
Status PrepareSharedMemory(DomainRestoreOptions& o, const CheckpointReader& reader, SharedMemoryState* shared) {
#ifdef HALITE_LIBVIRT_WITH_IMAGE_SERVER
  if (o.ram_dir.empty()) {
    HLT_ASSIGN_OR_RETURN(o.ram_dir, DefaultLibvirtRamDir(o.connect_uri));
  }
  std::string server = o.server_program;
  if (server.empty()) {
    HLT_ASSIGN_OR_RETURN(server, FindImageServerProgram());
  }
  HLT_ASSIGN_OR_RETURN(qemu::SharedMemoryPlan plan, qemu::PrepareSharedMemory(server, o.checkpoint, reader, o.image_dir,
                                                                              o.reader.parent_dirs, o.server_flags));
  const uint64_t ram_size = reader.regions()[*reader.FindRegion(qemu::kSharedRamRegion)].size;
  Say(o.on_notice, "memory shared: the domain maps " + plan.image_path + " privately (image server " +
                       (plan.started_server ? "started" : "already serving") + "); libvirt's RAM directory " +
                       o.ram_dir);
  LibvirtRestoreOptions& opt = o.restore;
  opt.private_file_memory = true;
  opt.qemu.lazy = false;
  opt.qemu.shared_regions = plan.shared_regions;
  const std::string image = plan.image_path;
  const std::string ram_dir = o.ram_dir;
  auto notice = o.on_notice;
  opt.before_start = [shared, server, ram_dir, image, notice](const std::string& name) -> Status {
    HLT_ASSIGN_OR_RETURN(shared->registration,
                         RamDirRegistration::Register(server, ram_dir, image_server::LibvirtShortName(name), image));
    if (shared->registration.started_server()) Say(notice, "memory shared: RAM directory server started at " + ram_dir);
    return Status::Ok();
  };
  opt.on_qemu_up = [shared, image, ram_size, notice](int pid) -> Status {
    // Never a guest on memory that is not the checkpoint's: QEMU must map the image itself.
    HLT_RETURN_IF_ERROR(CheckQemuMapsImage(pid, image, ram_size));
    shared->registration.Remove();  // QEMU holds the file: the name may serve another domain now
    Say(notice, fmt::format("memory shared: QEMU (pid {}) maps {} as its guest RAM", pid, image));
    return Status::Ok();
  };
  return Status::Ok();
#else
  (void)o;
  (void)reader;
  (void)shared;
  return Status::Unsupported("--memory shared: this hlt-restore was built without the image server");
#endif
}

// A lazy restore leaves a record for --resume, written once its QEMU is up (before any page moves).
void RecordLazyRestore(DomainRestoreOptions& o, const std::string& file_id, std::string* record_path) {
  const std::string ckpt = o.checkpoint;
  auto warning = o.on_warning;
  o.restore.on_qemu_up = [ckpt, file_id, record_path, warning](int pid) -> Status {
    qemu::RestoreRecord rec;
    std::error_code ec;
    const auto abs = std::filesystem::absolute(ckpt, ec);
    rec.checkpoint = ec || IsObjectStoreUri(ckpt) ? ckpt : abs.string();
    rec.file_id = file_id;
    rec.qemu_pid = pid;
    if (auto started = qemu::ProcessStartTime(pid)) rec.qemu_start_time = *started;
    *record_path = qemu::RecordPathForPid(pid);
    if (Status w = qemu::WriteRestoreRecord(rec, *record_path); !w.ok()) {
      Say(warning, w.message() + " (this restore cannot be resumed)");
      record_path->clear();
    }
    return Status::Ok();
  };
}

uint64_t MicrosecondsSince(std::chrono::steady_clock::time_point t) {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t).count());
}

Status RestoreOrResume(DomainRestoreOptions& o, StatusFile& status, LibvirtRestoreResult* result) {
  auto t = std::chrono::steady_clock::now();
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(o.connect_uri));
  const uint64_t connect_us = MicrosecondsSince(t);
  t = std::chrono::steady_clock::now();
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(o.checkpoint, o.reader));
  const uint64_t open_checkpoint_us = MicrosecondsSince(t);
  if (!o.resume_domain.empty()) return ResumeDomain(o, *conn, *reader, status, result);
  SharedMemoryState shared;
  if (o.shared_memory) HLT_RETURN_IF_ERROR(PrepareSharedMemory(o, *reader, &shared));
  std::string record_path;
  if (o.restore.qemu.lazy && !o.restore.on_qemu_up) RecordLazyRestore(o, HexId(reader->file_id()), &record_path);
  LibvirtRestoreOptions& opt = o.restore;
  auto on_started = std::move(opt.on_started);
  opt.on_started = [&status, on_started](const std::string& name, const std::string& uuid) {
    status.SetDomain(name, uuid);
    if (on_started) on_started(name, uuid);
  };
  auto on_running = std::move(opt.qemu.on_running);
  opt.qemu.on_running = [&status, on_running](uint64_t us) {
    status.Write("running");
    if (on_running) on_running(us);
  };
  if (opt.swtpm_storage_dir.empty()) {
    // Only needed for a domain with an emulated TPM: a URI of another host is an error only then (the library
    // says so when it needs the directory).
    if (auto dirs = LocalLibvirtDriverDirs(o.connect_uri, "--swtpm-dir")) opt.swtpm_storage_dir = dirs->swtpm_storage;
  }
  // --memory shared: the image server reads the checkpoint, not this process.
  if (o.shared_memory || !WarmupUseful(*reader, o.reader.block_cache != nullptr)) opt.warm_restore_order_bytes = 0;
  opt.warm_decode = reader->read_hints().remote;
  Status restored = RestoreLibvirtDomain(*conn, *reader, o.checkpoint, opt, result);
  result->phases.connect_us = connect_us;  // RestoreLibvirtDomain starts its result afresh
  result->phases.open_checkpoint_us = open_checkpoint_us;
  HLT_RETURN_IF_ERROR(restored);
  if (!record_path.empty()) unlink(record_path.c_str());
  status.Write("completed");
  return Status::Ok();
}

}  // namespace

Status RestoreDomain(DomainRestoreOptions options, LibvirtRestoreResult* result) {
  LibvirtRestoreResult local;
  if (result == nullptr) result = &local;
  StatusFile status(options.status_path);
  if (options.resume_domain.empty()) {
    status.Write("starting");
  } else {
    const StatusFile::Contents before = StatusFile::Read(options.status_path);
    status.SetDomain(options.resume_domain, before.domain == options.resume_domain ? before.uuid : "");
    status.Write("resuming");
  }
  Status s = RestoreOrResume(options, status, result);
  if (!s.ok()) status.Write("failed", s.ToString());
  return s;
}

}  // namespace halite::libvirt
