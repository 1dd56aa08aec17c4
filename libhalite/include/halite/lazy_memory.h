// LazyMemory: guest memory of this process, filled on first touch from a checkpoint through userfaultfd.
//
// This is what a custom VMM links against to start a guest before its memory is restored: LazyMemory maps one
// range per checkpoint region (anonymous or memfd/shmem memory, or a range the caller mapped), registers it with
// userfaultfd for missing-page faults, and runs handler threads that read the faults and hand them to a
// RestoreEngine. It is also the engine's PageSink (sink()): runs of pages go in with UFFDIO_COPY, zero pages with
// UFFDIO_ZEROPAGE, and the faulting threads are woken.
//
//   auto mem = LazyMemory::Create(reader->regions());                 // maps and registers
//   auto engine = RestoreEngine::Create(*reader, (*mem)->sink(), {});  // the engine installs through mem
//   (*engine)->Start();                                                // preload, background loader
//   (*mem)->Serve(**engine);                                           // handler threads call the engine
//   ... run the guest on (*mem)->base(region) ...
//   (*mem)->Stop(); engine->reset(); mem->reset();                     // in this order: handlers call the engine
//
// Events: when the owner of the memory discards pages (madvise MADV_DONTNEED/REMOVE, e.g. a balloon) or unmaps
// them, the kernel reports UFFD_EVENT_REMOVE/UNMAP; those pages are then never installed from the checkpoint, and
// a later touch of a discarded page gets a fresh zero page, as plain anonymous memory would. (A copy already in
// flight when the discard happens may still land; the discarding owner must not rely on the old content either
// way.) mremap and fork of registered memory are not followed.
//
// Requirements: userfaultfd with UFFD_FEATURE_EVENT_REMOVE|EVENT_UNMAP (Linux >= 4.11; MISSING_SHMEM for memfd
// backing). Unprivileged processes need vm.unprivileged_userfaultfd=1, access to /dev/userfaultfd (Linux >= 6.1),
// or fall back to UFFD_USER_MODE_ONLY, in which case the kernel's own accesses to lazy memory (e.g. read(2) into
// it) fail with EFAULT instead of faulting the page in; Probe() says which mode is available.
//
// Ownership: LazyMemory owns the userfaultfd, the handler threads and the mappings it created (unmapped on
// destruction); a caller's mappings given to Attach stay the caller's (unregistered on destruction).
// Thread-safety: sink() is used concurrently by the engine and the handlers; base(), size(), status() and
// Stats() from any thread; Create/Serve/Stop from one controlling thread.
#ifndef HALITE_LAZY_MEMORY_H_
#define HALITE_LAZY_MEMORY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halite/export.h"
#include "halite/checkpoint_types.h"
#include "halite/page_sink.h"
#include "halite/restore_engine.h"
#include "halite/status.h"

namespace halite {

enum class LazyBacking {
  kAnonymous,  // MAP_PRIVATE|MAP_ANONYMOUS
  kMemfd,      // a memfd (shmem) per region, MAP_SHARED: another process (a VMM's device model) can map it too
};

// What to do with a fault the engine could not serve (a corrupt block, a read that kept failing).
enum class FaultErrorAction {
  kHold,      // leave the faulting thread blocked and record the error in status(): the owner stops the guest
  kZeroFill,  // install a zero page (the error is still recorded in status())
  kRetry,     // ask the engine again (after a millisecond)
};

struct HALITE_EXPORT LazyMemoryOptions {
  LazyBacking backing = LazyBacking::kAnonymous;
  // Threads reading the userfaultfd. Faults on different blocks are served in parallel up to this many.
  unsigned handler_threads = 4;
  // Called on a handler thread for every fault the engine fails; default: kHold.
  std::function<FaultErrorAction(PageRef page, const Status& error)> on_fault_error;
};

struct HALITE_EXPORT LazyMemoryStats {
  uint64_t faults = 0;            // page-fault messages read from the userfaultfd
  uint64_t faults_done = 0;       // ... of which the handlers have finished (their statistics are complete)
  uint64_t write_faults = 0;      // ... of which write faults
  uint64_t discarded_faults = 0;  // ... on discarded pages, served with a zero page without the engine
  uint64_t copy_ioctls = 0;       // UFFDIO_COPY calls
  uint64_t zeropage_ioctls = 0;   // UFFDIO_ZEROPAGE calls
  uint64_t wake_ioctls = 0;       // UFFDIO_WAKE calls
  uint64_t eexist = 0;            // pages found already populated during a copy (left as they were)
  uint64_t eagain_retries = 0;    // copies retried because the address space was changing
  uint64_t remove_events = 0;     // UFFD_EVENT_REMOVE
  uint64_t unmap_events = 0;      // UFFD_EVENT_UNMAP
  uint64_t errors = 0;            // faults the engine failed
};

class HALITE_EXPORT LazyMemory {
 public:
  // Ok when userfaultfd can be used here; otherwise kUnsupported explaining why and what would enable it.
  // `mode` (optional) receives how it is opened: "syscall", "/dev/userfaultfd" or "syscall user-mode-only".
  static Status Probe(std::string* mode = nullptr);

  // Maps one range per region (size region.size, 4096-byte pages) and registers them. Nothing is populated.
  // Errors: kUnsupported (no userfaultfd; see Probe), kIoError (mmap or memfd failed), kInvalidArgument
  // (a region whose host page size is not 4096).
  static Result<std::unique_ptr<LazyMemory>> Create(std::span<const Region> regions, LazyMemoryOptions options = {});
  // Registers the caller's mappings, one per region (page-aligned, region.size bytes, private anonymous or
  // shared memfd/shmem memory). Pages already populated count as present and are never overwritten. The
  // mappings must stay mapped until this object is destroyed.
  static Result<std::unique_ptr<LazyMemory>> Attach(std::span<const Region> regions, std::span<void* const> bases,
                                                    LazyMemoryOptions options = {});
  ~LazyMemory();  // stops the handlers, unregisters, unmaps what it mapped
  LazyMemory(const LazyMemory&) = delete;
  LazyMemory& operator=(const LazyMemory&) = delete;

  // The sink to give RestoreEngine::Create. Valid as long as this object.
  PageSink& sink();
  // Starts the handler threads, which send every fault to `engine` (borrowed until Stop or destruction).
  // Call once, after the engine exists. Faults taken before Serve wait for it.
  Status Serve(RestoreEngine& engine);
  // Stops serving: the handler threads end and the memory is unregistered from userfaultfd, so it behaves as
  // ordinary memory again (the owner may munmap or madvise it). Pages not installed by then read as zeros
  // (anonymous) or as the memfd's holes, and a thread held by a failed fault is released onto such a page: call
  // it once the guest is stopped, or once the engine has installed everything it must. Idempotent.
  void Stop();

  size_t region_count() const;
  uint8_t* base(uint32_t region) const;
  uint64_t size(uint32_t region) const;
  int memfd(uint32_t region) const;  // -1 for anonymous or attached memory
  std::string mode() const;          // how the userfaultfd was opened (see Probe)

  // Ok, or the first fault error the engine returned (with the action taken).
  Status status() const;
  // Blocks until status() is not ok or `timeout` passes; returns status().
  Status WaitForError(std::chrono::milliseconds timeout) const;
  LazyMemoryStats Stats() const;

  class Impl;

 private:
  explicit LazyMemory(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite

#endif  // HALITE_LAZY_MEMORY_H_
