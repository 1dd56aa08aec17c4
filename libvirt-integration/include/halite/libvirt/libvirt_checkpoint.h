// A libvirt domain into a libhalite checkpoint, and back (as itself or as a clone): what `hlt-save libvirt` and
// `hlt-restore libvirt` call. Thin over the QEMU integration (halite/qemu/qemu_checkpoint.h): libvirt provides
// the domain's XML, its disks and the way to reach its QEMU; the pages travel exactly as for plain QEMU.
//
// A checkpoint made from libvirt is a QEMU checkpoint plus two blobs:
//   "libvirt.domain.xml"  the domain's migratable XML at the save (its disks point at the frozen images);
//   "libvirt.disks.json"  each writable disk's frozen image: {"target", "path", "format", "size", "xxh3_128"}.
//
// Disks: memory and disk are captured at one instant. With the guest paused, an external disk-only snapshot (no
// libvirt metadata) freezes every writable disk's image and moves the domain onto a new qcow2 overlay beside it
// (made before the pause), the NVRAM and TPM state files are read, and QEMU starts saving: a stopped-guest save
// keeps the guest paused for its whole stream; a live save (QEMU's background snapshot) resumes it as soon as QEMU
// has captured the devices and write-protected the memory, a pause of tens of milliseconds. The frozen images are
// the bases of every restore: each restore gets overlays of its own (`qemu-img create -b FROZEN -F FMT`), so a
// frozen image is never written, and a restore refuses to start when one changed (size or content hash). A save
// that fails after the freeze commits each overlay back into its image and removes it.
#ifndef HALITE_LIBVIRT_LIBVIRT_CHECKPOINT_H_
#define HALITE_LIBVIRT_LIBVIRT_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/libvirt/domain_xml.h"
#include "halite/libvirt/libvirt_connection.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/status.h"

namespace halite::libvirt {

inline constexpr const char* kDomainXmlBlobName = "libvirt.domain.xml";
inline constexpr const char* kDisksBlobName = "libvirt.disks.json";

struct FrozenDisk {
  std::string target;  // "vda"
  std::string path;    // the image as of the save (absolute)
  std::string format;  // "qcow2", "raw"
  uint64_t size = 0;   // bytes of the image file
  std::string xxh3_128;  // hex of XXH3-128 over the image file's bytes
};

// ---- Save ----

struct LibvirtSaveOptions {
  enum class Then { kContinue, kStop, kDestroy };
  Then then = Then::kContinue;  // afterwards: resume a guest that was running, leave it paused, or destroy it
  // The QEMU save (writer options, page-table walk, live). `then` and `before_finish` are set here.
  qemu::CheckpointSaveOptions qemu;
};

// cont, stop or destroy (hlt-save libvirt --then). Errors: kInvalidArgument "expected cont, stop or destroy, got
// \"X\"".
Result<LibvirtSaveOptions::Then> ParseLibvirtSaveThen(std::string_view name);

struct LibvirtSaveResult {
  qemu::CheckpointSaveResult qemu;
  std::string domain;
  std::vector<FrozenDisk> disks;
  std::vector<std::string> overlays;  // where the domain's writable disks went on (one per frozen disk)
  double guest_paused_seconds = 0;    // stopped-guest save: pause to resume (0 when the guest stays paused or
                                      // was not running); a live save's pause is in qemu.live_pause
  std::string nvram;                  // the UEFI variable store saved with the memory ("" without one)
  uint64_t nvram_bytes = 0;
  std::string tpm_state_dir;          // the TPM emulator's state directory saved with the memory ("" without one)
  std::vector<std::string> tpm_state_files;
};

// Saves running domain `name` into checkpoint `path` (nothing is created unless everything succeeds; a save that
// fails leaves the domain on its own disk images). Errors: kNotFound for an unknown domain, kInvalidArgument for
// a domain that is not running, those of libvirt's disk snapshot (e.g. a disk in a block job), and those of the
// QEMU save. A guest that was running runs again if the save fails. A live save of a paused domain is made as a
// stopped one (result.qemu.live_note says so).
Result<LibvirtSaveResult> SaveLibvirtDomain(const Connection& connection, const std::string& name,
                                            const std::string& path, LibvirtSaveOptions options);

// ---- Restore ----

struct LibvirtRestoreOptions {
  std::string name;       // empty: the saved name (a clone: "<saved>-clone-<8 hex digits>")
  // A new identity: new UUID, new MACs, new VM generation ID, and its own per-domain files (logs, sockets, NVRAM,
  // TPM state: DomainXml::GiveClonePathsOfItsOwn).
  bool clone = false;
  // A clone's NICs are unplugged and plugged again once every page is in, so that the guest probes them with
  // their new MACs (the migrated virtio-net state and the guest's driver still hold the saved ones). Needs the
  // guest to let go of a NIC on request (ACPI PCI hotplug), as any hot unplug does.
  bool replug_nics = true;
  int replug_timeout_ms = 15000;  // per NIC, for the guest to release it
  // Where each restore's disk overlays and NVRAM copy go (empty: beside the checkpoint; required for one on an
  // object store). Created when missing.
  std::string disk_dir;
  // libvirt's swtpm storage directory on this host (swtpm's state of a domain is DIR/UUID/tpm2): a restore of a
  // domain with an emulated TPM puts the saved TPM state there under the domain's UUID before libvirt starts it.
  // Required when the checkpoint carries TPM state.
  std::string swtpm_storage_dir;
  // Once every page is in, set the guest's clock to the host's through the guest agent (virDomainSetTime):
  // a restored guest's clock stands where it stood at the save. Skipped, saying so, when the domain has no guest
  // agent channel; a guest agent that does not answer within sync_time_timeout_ms is reported, not fatal.
  bool sync_time = false;
  int sync_time_timeout_ms = 15000;
  bool paused = false;    // the guest stays paused (libvirt says "paused") until resumed
  // Where the private QMP socket of the new QEMU goes (a new directory under it; empty: /tmp).
  std::string runtime_dir;
  qemu::CheckpointRestoreOptions qemu;  // lazy options; paused is set here
  // Called once the domain is defined and started, before any page moves (its name and UUID).
  std::function<void(const std::string& name, const std::string& uuid)> on_started;

  // Guest RAM as a private mapping of a file libvirt names under its memory backing directory
  // (<memoryBacking><source type='file'/><access mode='private'/>): what `hlt-restore libvirt --memory shared`
  // makes resolve to a checkpoint image. The domain's <memory> must equal the checkpoint's pc.ram region. Use with
  // an eager restore whose qemu.shared_regions names pc.ram.
  bool private_file_memory = false;
  // Called with the domain's final name before libvirt starts it; a failure stops the restore (nothing started).
  std::function<Status(const std::string& name)> before_start;
  // Called once the domain's QEMU answers on its QMP socket (its memory backends exist), with QEMU's pid, before
  // any state is sent; a failure destroys the domain.
  std::function<Status(int qemu_pid)> on_qemu_up;
  // While libvirt starts QEMU (hundreds of ms to seconds during which no page can move), the head of the restore
  // order (the working set first) is read ahead, up to this many stored bytes, so that the guest's first faults
  // find it near (halite/restore_order_warmup.h); it stops when the memory restore begins. 0: off (the default:
  // on the 2 GiB desktop of bench/results/2026-11-28-s3desk27 it cut neither the stall nor the time to
  // interactive, locally or from s3://). RestoreDomain sets it to 0 where it cannot bring anything (WarmupUseful:
  // a remote file without a block cache) and for --memory shared (the image server reads the checkpoint).
  uint64_t warm_restore_order_bytes = 0;
  bool warm_decode = false;  // remote: verify and decode each payload, which is what puts it in the block cache
};

struct LibvirtRestoreResult {
  std::string domain;
  std::string uuid;
  std::vector<std::string> overlays;
  bool had_genid = false;          // the saved domain had a VM generation ID device (renewed for a clone)
  std::vector<std::string> replugged;  // a clone's NICs plugged again, by their new MAC
  std::vector<RenamedPath> renamed;    // a clone's per-domain files and sockets
  std::string nvram;                   // this restore's copy of the saved UEFI variables ("" without)
  std::string tpm_state;               // the TPM state directory this restore's swtpm starts on ("" without)
  std::string tpm_note;                // why the TPM starts without the saved state files, when it does
  struct TimeSync {
    bool attempted = false;
    bool synced = false;
    bool read_before = false;   // the agent told the guest's time before it was set
    double guest_behind_s = 0;  // host time minus the guest's, just before it was set
    std::string note;           // why it was not synced
  } time_sync;
  uint64_t define_us = 0;          // call start to the domain started (waiting for its memory)
  // Where the time before the restore call goes (microseconds each, in this order; 0 for a step not taken).
  struct Phases {
    uint64_t connect_us = 0;          // libvirt connection opened (an embedded driver starts inside the process)
    uint64_t open_checkpoint_us = 0;  // CheckpointReader::Open (from an object store: the footer and index fetched)
    uint64_t read_blobs_us = 0;       // the domain XML, frozen disks, device state and NVRAM/TPM blobs read
    uint64_t verify_disks_us = 0;     // every frozen disk image hashed and compared with the checkpoint's record
    uint64_t prepare_files_us = 0;    // disk overlays, NVRAM copy and TPM state placed
    uint64_t create_domain_us = 0;    // virDomainCreateXML: libvirt starts QEMU (and swtpm), -incoming defer
    uint64_t qemu_ready_us = 0;       // our QMP socket connected, QEMU checked, migration blocker installed
    // The restore order's head read meanwhile (LibvirtRestoreOptions::warm_restore_order_bytes).
    uint32_t warm_blocks = 0;
    uint64_t warm_stored_bytes = 0;
    uint32_t warm_from_cache = 0;
  } phases;
  qemu::CheckpointRestoreResult qemu;
};

// The frozen disks recorded in a checkpoint (empty for a domain without writable disks). kInvalidArgument for a
// checkpoint not made by SaveLibvirtDomain.
Result<std::vector<FrozenDisk>> ReadFrozenDisks(const CheckpointReader& reader);
// Checks that every frozen image is still there with its size and content hash; kInvalidArgument naming the
// first that is not.
Status VerifyFrozenDisks(const std::vector<FrozenDisk>& disks);

// Creates a transient domain from the checkpoint's XML (its own name, UUID, MACs and disk overlays when a
// clone), started with `-incoming defer`, and restores its memory lazily (or eagerly) through the QEMU path.
// Returns when the restore completed (every page in). Before the guest runs, every failure removes what this
// call made (the domain, the overlays). Errors: kInvalidArgument for a checkpoint not from libvirt, a frozen
// disk that changed, a name in use or an overlay that exists; then those of libvirt and of the QEMU restore.
Status RestoreLibvirtDomain(const Connection& connection, const CheckpointReader& reader,
                            const std::string& checkpoint_path, LibvirtRestoreOptions options,
                            LibvirtRestoreResult* result);

struct LibvirtResumeOptions {
  qemu::CheckpointRestoreOptions qemu;  // lazy options (resume is set here)
  // Called with the domain's QEMU pid before anything is asked of it: the caller checks that this QEMU was
  // restoring this checkpoint (its record); a failure stops the resume.
  std::function<Status(int qemu_pid)> check_qemu;
};

// Takes over the lazy restore of domain `domain_name` (started by RestoreLibvirtDomain) whose restorer died:
// finds its QEMU by the domain's UUID and the restore's private QMP socket on QEMU's command line, then resumes
// it (qemu::CheckpointRestoreOptions::resume) and, once every page is in, removes the migration blocker and the
// private socket as the restore would have. Errors: kNotFound (no such domain, or no QEMU for it),
// kInvalidArgument (a domain hlt-restore did not start), then those of the resume.
Status ResumeLibvirtDomain(const Connection& connection, const CheckpointReader& reader, const std::string& domain_name,
                           LibvirtResumeOptions options, LibvirtRestoreResult* result);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_CHECKPOINT_H_
