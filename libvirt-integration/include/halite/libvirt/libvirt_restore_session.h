// A checkpoint restored into a libvirt domain as `hlt-restore libvirt` does it, for any program that embeds
// libhalite: the connection, the checkpoint opened, a clone or the saved identity (LibvirtRestoreOptions), copy or
// shared memory (the RAM directory server over libvirt's memory backing directory and the host's image server),
// the record that lets a later process take over a lazy restore whose restorer died, that take-over (resume), and
// the status file a broker polls. Detaching and supervising the restore (restore_supervisor.h) is the caller's:
// it forks.
#ifndef HALITE_LIBVIRT_LIBVIRT_RESTORE_SESSION_H_
#define HALITE_LIBVIRT_LIBVIRT_RESTORE_SESSION_H_

#include <functional>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/libvirt/libvirt_checkpoint.h"
#include "halite/status.h"

namespace halite::libvirt {

struct DomainRestoreOptions {
  std::string connect_uri;  // libvirt URI (empty: libvirt's default)
  std::string checkpoint;   // a path or an s3:// / rados:// URI
  ReaderOptions reader;
  // Name, clone, disk directory, paused, time sync, the lazy options (restore.qemu) and the callbacks
  // (restore.on_started, restore.qemu.on_running, restore.qemu.on_resumed...). An empty swtpm_storage_dir is taken
  // from the URI when it names this host's QEMU driver.
  LibvirtRestoreOptions restore;
  // Take over the lazy restore of this domain, whose restorer died (its QEMU waits in postcopy-paused): the
  // record of its QEMU ($HALITE_RUN_DIR or /run/halite/restores/qemu-PID.json) must name this checkpoint.
  std::string resume_domain;

  // The domain's RAM (pc.ram) a private mapping of the checkpoint's image from the host's image server; the
  // device state goes eagerly. libvirt names the RAM file under its memory backing directory (ram_dir, empty: the
  // URI's), where a RAM directory server (`PROGRAM serve-ram-dir`) points it at the image.
  bool shared_memory = false;
  std::string ram_dir;
  std::string image_dir = "/run/halite/images";
  // The program whose `serve` and `serve-ram-dir` modes are the servers (empty: the halite-image-server daemon,
  // FindImageServerProgram of halite/image_server_process.h), and
  // the reader flags the image server needs to read the same checkpoint (--block-cache DIR, key flags).
  std::string server_program;
  std::vector<std::string> server_flags;

  // The status file (StatusFile, restore_status_file.h): starting or resuming, running, completed or failed.
  // Empty: none.
  std::string status_path;

  // Lines that say what the restore decided or found, and warnings that do not stop it. Null: not reported.
  std::function<void(const std::string&)> on_notice;
  std::function<void(const std::string&)> on_warning;
};

// Restores (or with resume_domain resumes) to completion: every page in. The status file says "failed" with the
// error when it fails. Errors: kInvalidArgument for options that contradict each other, a record of another
// checkpoint or process; those of opening the checkpoint, of the servers, of libvirt and of the QEMU restore
// (RestoreLibvirtDomain, ResumeLibvirtDomain).
Status RestoreDomain(DomainRestoreOptions options, LibvirtRestoreResult* result);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_RESTORE_SESSION_H_
