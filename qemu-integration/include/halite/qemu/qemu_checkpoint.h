// A running QEMU into a libhalite checkpoint, and a checkpoint back into a QEMU started with `-incoming defer`:
// what `hlt-save qemu` and `hlt-restore qemu` call. The glue between QEMU's world (qemu_session.h,
// qemu_push_source.h) and the library's writer, reader, restore engine and page-table walker.
//
// A checkpoint made from QEMU has
//   - metadata vmm_kind QEMU, machine_type from the stream's configuration record (e.g. "pc-i440fx-7.2");
//   - one region per RAMBlock, in the stream's order, named like it ("pc.ram", "pc.bios", "/rom@etc/acpi/tables",
//     ...), size = its used length, host_page_size = its page size (`info ramblock`), guest_phys_base = where
//     `info mtree -f` shows the block's offset 0 in guest-physical memory (0 when it is not mapped, e.g. fw_cfg
//     ROMs). The rest of the block's layout is the machine's (i440fx maps pc.ram above 3 GiB at 4 GiB);
//   - blob kQemuStateBlobName: EncodeSavedVmState() (configuration, RAMBlock list, device state, VMDESC);
//   - hints: the pages a running guest touched in a window before the save (accessed-bit samples) and, for a
//     live save, the pages the guest wrote during the save in the order they arrived (the access trace);
//     virtual-address runs from the guest's own page tables.
//
// The page-table walk (halite/x86_guest_hints.h) reads guest memory back from the writer's staged pages; while
// the stream passes, the save only notes the pages that look like top-level tables (24 bytes each).
#ifndef HALITE_QEMU_QEMU_CHECKPOINT_H_
#define HALITE_QEMU_QEMU_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/qemu/qemu_access_window.h"
#include "halite/qemu/qemu_direct_placement.h"
#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_push_source.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/qemu/qemu_session.h"
#include "halite/restore_engine.h"
#include "halite/status.h"
#include "halite/x86_guest_hints.h"
#include "halite/qemu/qemu_thp_regather.h"
#include "halite/x86_page_tables.h"

namespace halite::qemu {

inline constexpr const char* kQemuStateBlobName = "qemu.state";

// ---- Save ----

struct CheckpointSaveOptions {
  bool live = false;  // background-snapshot: the guest keeps running
  // After the stream: kContinue resumes a guest that was running (at once, before the checkpoint is compressed);
  // kLeaveStopped leaves it stopped (a live save stops it then); kQuit ends QEMU once the checkpoint is written.
  SaveOptions::Then then = SaveOptions::Then::kContinue;
  int timeout_ms = 600000;
  WriterOptions writer;  // vmm_kind and machine_type are filled in here
  bool va_walk = true;
  x86::GuestWalkOptions walk;  // limits.max_pfn is set from the guest's memory map
  // Live saves: give the out-of-scan-order pages to the writer as the access trace.
  bool live_access_trace = true;
  // A guest that is running: sample the accessed bits of its page tables over this window before the save
  // (halite/qemu/qemu_access_window.h) and give the pages it touched, sample by sample, as the access trace
  // (first, before a live save's). window_ms 0: off.
  AccessWindowOptions access_window;
  // How the guest is paused and resumed (empty: QMP stop and cont). A management layer passes its own so that it
  // knows (libvirt: virDomainSuspend and virDomainResume).
  std::function<Status()> pause_guest, resume_guest;
  // What must be captured at the instant the saved state is taken besides QEMU's own state (libvirt: the domain's
  // disks frozen, its NVRAM and TPM files read). Called once, with the guest stopped, right before QEMU starts
  // saving. A stopped-guest save calls it inside its stop. A live save of a running guest pauses the guest
  // (pause_guest), calls it, starts QEMU's background snapshot, and resumes the guest (resume_guest) once QEMU has
  // captured the devices and write-protected the memory (its first RAM page arrives: halite/qemu/qemu_session.h):
  // the saved memory is the memory as of this call, and the pause is reported in live_pause. An error ends the save
  // before QEMU started it, with the guest running again.
  std::function<Status()> at_snapshot_instant;
  // A RAMBlock whose content the caller read at the saved instant, or null (libvirt: the UEFI variable store behind
  // QEMU's pflash, read in at_snapshot_instant). Its pages are taken from there instead of the stream: QEMU's
  // background snapshot does not write-protect ROM devices such as a pflash, so a live stream may carry what the
  // guest wrote to it during the save, or a page torn by such a write. Called for each RAMBlock when the stream
  // lists them (after at_snapshot_instant); bytes of another length than the block's are not used. They must stay
  // valid until the save returns.
  std::function<const std::vector<uint8_t>*(const std::string& block, uint64_t used_length)> block_content_at_instant;
  // Called after the pages and hints are given and before Finish (hint files from the command line).
  std::function<Status(CheckpointWriter&)> before_finish;
  // Incremental saves (writer.parent) of a clone whose RAMBlock is a private mapping of a file (hlt-restore
  // --memory shared; halite/qemu/qemu_ram_mapping.h): says whether `mapped_file` holds exactly the parent's view
  // of region `region` (the image server of the parent serves it). When it does, and the save is not live, the
  // pages QEMU's page map shows unwritten are declared IN_PARENT (CheckpointWriter::DeclareInParent) and never
  // read. Needs QEMU's pid (the QMP socket's peer) and ptrace-read permission over it; otherwise nothing changes.
  std::function<Result<bool>(const std::string& mapped_file, const std::string& region)> is_parent_image;
};

// A live save's pause around at_snapshot_instant (CheckpointSaveOptions), in milliseconds of the host's steady
// clock. QEMU 7.2 starts the vCPUs itself as soon as it has captured the guest, so the guest may run again a few
// milliseconds before resume_ms ends: total_ms is the longest the guest can have been stopped.
struct LivePauseReport {
  bool paused = false;    // at_snapshot_instant ran inside a pause of this save's own
  double total_ms = 0;    // the pause call's start to the resume call's return
  double pause_ms = 0;    // the pause call (libvirt: virDomainSuspend)
  double instant_ms = 0;  // at_snapshot_instant
  double capture_ms = 0;  // `migrate` to QEMU's first RAM page (devices saved, memory write-protected)
  double resume_ms = 0;   // the resume call (libvirt: virDomainResume)
  // QEMU's STOP event to its RESUME event, by QEMU's own timestamps: how long the vCPUs stood still (-1 when the
  // events were not seen).
  double vcpus_stopped_ms = -1;
};

// The page-table walk's report (halite/x86_guest_hints.h).
using QemuVaReport = x86::PageTableHintReport;

struct CheckpointSaveResult {
  std::string machine_type;
  bool was_running = false;
  bool live = false;
  SaveReport save;          // stream statistics, out-of-scan-order pages (the working-set sample)
  uint64_t blocks = 0;      // RAMBlocks (= regions)
  uint64_t data_pages = 0;  // PAGE records with non-zero content
  uint64_t zero_pages = 0;  // ZERO records and all-zero PAGE records
  uint64_t access_trace_pages = 0;
  AccessWindowReport access_window;  // samples.empty() and skipped "off" when not asked for
  uint64_t access_window_pages = 0;  // of those, pages given to the writer (in its regions)
  size_t state_blob_bytes = 0;
  double guest_stopped_seconds = 0;  // non-live: stop to cont (0 when the guest stays stopped or was not running)
  LivePauseReport live_pause;        // a live save with at_snapshot_instant
  ThpRegatherReport thp_regather;    // a live save of a running guest: its RAM gathered into huge pages first
  std::vector<std::string> blocks_from_instant;  // RAMBlocks saved from block_content_at_instant
  // Why a live save was made as a stopped one (the guest was not running: QEMU 7.2's background snapshot would
  // have started it), or "".
  std::string live_note;
  // is_parent_image: the file QEMU maps a RAMBlock from and the pages it never wrote (declared IN_PARENT), or why
  // that was not used.
  std::string parent_image;
  uint64_t parent_image_unwritten_pages = 0;
  std::string parent_image_note;
  double stream_seconds = 0;
  QemuVaReport va;
  WriteSummary summary;
  double total_seconds = 0;
};

// Saves the VM behind `qmp` into the checkpoint `path` (nothing is created unless everything succeeds). Errors:
// those of the QMP conversation and the stream (qemu_session.h), of the writer, and invalid-argument for a guest
// whose state this cannot save (e.g. RAMBlocks that change size). The guest is resumed if the save fails after
// stopping it.
Result<CheckpointSaveResult> SaveQemuToCheckpoint(QmpClient& qmp, const std::string& path,
                                                  CheckpointSaveOptions options);

// ---- Restore ----

inline constexpr uint32_t kDefaultIdleSweepMs = 1000;

// Where the pages of the big RAMBlocks go after LISTEN (qemu_direct_placement.h).
enum class PagePlacement {
  kAuto,     // directly into QEMU's memory through its userfaultfd when permitted, else the channel. Eager
             // too: a postcopy whose RUN leaves the guest paused until every page is placed (a precopy stream
             // is parsed and placed 4 KiB at a time by one QEMU thread); the fallback is the precopy stream
  kDirect,   // directly, or fail (unsupported) saying why not
  kChannel,  // every page in QEMU's migration stream
};
// RAMBlocks smaller than this stay on the channel (ROMs, ACPI tables: a few pages each).
inline constexpr uint64_t kMinDirectBlockBytes = 2 << 20;

struct CheckpointRestoreOptions {
  bool lazy = true;  // postcopy; false: eager, the guest starts after all of it (placement says how)
  // Lazy: the engine's loader, rate limit, working-set preload, prediction, timeline. Eager overrides
  // preload_all (on) and background_loader (off).
  // The loader off, engine.idle_sweep_ms = 0 means kDefaultIdleSweepMs: the stream has to end some time.
  RestoreEngineOptions engine;
  // lazy is overridden by the one above.
  PushRestoreOptions channel;
  // Eager: leave the guest paused after the load (a lazy restore's guest runs as QEMU's autostart says: paused
  // under -S).
  bool paused = false;
  // Compare the destination's RAMBlocks with the checkpoint's before anything is sent. Off only to see QEMU's own
  // check fail the load (tests).
  bool check_ram_blocks = true;
  // Regions (RAMBlock names) the destination already maps from a checkpoint image (memory-backend-file over the
  // image server, share=off): eager only; none of their pages is sent, the stream carries the other RAMBlocks
  // and the device state. Every name must be a region of the checkpoint.
  std::vector<std::string> shared_regions;
  PagePlacement placement = PagePlacement::kAuto;
  // QEMU's pid for direct placement; <= 0: the launched `process`'s, else the QMP socket's peer.
  int qemu_pid = 0;
  // Empty: a socketpair passed with getfd. Otherwise QEMU listens on this unix socket path (libvirt).
  std::string unix_socket_path;
  int completion_timeout_ms = 120000;
  // Take over a lazy restore of this checkpoint whose source died part way (QEMU's migration is
  // postcopy-paused, its guest frozen on the pages it lacks): QEMU's postcopy recovery (`migrate-recover`, the
  // received bitmaps, POSTCOPY_RESUME), then the rest as a lazy restore. What QEMU holds already is never sent
  // again: the pages of its received bitmaps, and in the big RAMBlocks every page its page map shows populated
  // (pages placed directly are in no bitmap of QEMU's). Needs QEMU's pid and ptrace-read permission over it.
  bool resume = false;
  // Resume: how long QEMU may take to notice that its old source is gone (postcopy-active -> postcopy-paused).
  int resume_paused_wait_ms = 10000;
  // Called on the calling thread once QEMU reports the guest running (its RESUME event).
  std::function<void(uint64_t start_to_running_us)> on_running;
  // Resume: called on the calling thread once QEMU acknowledged POSTCOPY_RESUME (its guest's faults are served
  // again from then on), with the time since the call began.
  std::function<void(uint64_t start_to_resumed_us)> on_resumed;
  // Lazy: called on the calling thread about every progress_interval_ms (>= 5) while pages are being sent.
  // Eager: called from a reporter thread every progress_interval_ms while the memory loads, then once at the end
  // on the calling thread (never concurrently with itself).
  int progress_interval_ms = 0;
  std::function<void(const RestoreEngineStats& engine, const PushRestoreStats& channel)> on_progress;
};

struct CheckpointRestoreResult {
  bool lazy = true;
  PushRestoreStats channel;
  RestoreEngineStats engine;           // at the end (loader off: when the idle sweep began)
  RestoreEngineStats engine_final;     // at the end, everything included
  uint64_t start_to_connect_us = 0;    // call start to the migration channel being connected
  uint64_t start_to_running_us = 0;    // call start to QEMU's RESUME event (QEMU's clock; 0 if never seen)
  uint64_t start_to_loaded_us = 0;     // call start to the last stored page sent
  uint64_t total_us = 0;               // call start to QEMU reporting the migration completed
  int64_t wall_start_us = 0;           // wall clock (µs since the epoch) at the call start
  int64_t engine_created_wall_us = 0;  // wall clock when the engine was created (its timeline's time 0)
  uint64_t zero_pages_unsent = 0;      // lazy: zero and absent pages never sent (they read as zero)
  uint64_t sweep_blocks = 0;           // loader off: blocks read by the engine's idle sweep
  std::vector<PageRef> requested;      // pages QEMU asked for, in order (for --record-trace)
  std::string timeline_csv;            // engine timeline when options.engine.record_timeline
  std::string final_status;
  // "direct" or "channel"; for the channel, why (asked for, eager, not permitted, ...).
  std::string placement = "channel";
  std::string placement_reason;
  std::vector<std::string> direct_blocks;  // RAMBlocks placed through QEMU's userfaultfd
  DirectPlacementStats direct;
  uint64_t direct_setup_us = 0;  // LISTEN's PONG wait, the userfaultfd duplicated (after PACKAGED was sent)
  // Resume: QEMU's migration status when the call began, pages QEMU held already (from its received bitmaps,
  // and from its page map in the big RAMBlocks), and call start to RESUME_ACK (the guest's vCPUs can get pages
  // again from then on).
  std::string resumed_from_status;
  uint64_t resume_present_pages = 0;
  uint64_t start_to_resumed_us = 0;
};

// Restores `reader`'s checkpoint into the QEMU behind `qmp`, which must be waiting with `-incoming defer` (or,
// with options.resume, be paused in a lazy restore of the same checkpoint: the caller checks that it is the same,
// e.g. from a record the first restore left; the RAMBlocks are compared here as always).
// `process` (optional, borrowed) is a QEMU this process launched: errors then say whether it died and quote its
// stderr. Before anything is sent: invalid-argument for a checkpoint not made from QEMU, a QEMU not waiting
// for an incoming migration, or RAMBlocks that differ from the checkpoint's (name, size); unsupported when
// postcopy is not available. Then: io-error / aborted when QEMU goes away or rejects the stream; corrupt (from
// the reader) when a block fails verification, in which case none of its pages is sent and the channel is shut
// down: a lazy destination pauses its migration ("postcopy-paused") with the guest frozen, and stays alive.
Status RestoreCheckpointIntoQemu(const CheckpointReader& reader, QmpClient& qmp,
                                 const CheckpointRestoreOptions& options, CheckpointRestoreResult* result,
                                 QemuProcess* process = nullptr);

// The saved QEMU state stored in a checkpoint. Errors: not-found / invalid-argument for a checkpoint not made
// from QEMU, corrupt for a damaged blob.
Result<SavedVmState> ReadSavedVmState(const CheckpointReader& reader);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_CHECKPOINT_H_
