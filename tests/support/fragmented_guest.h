// A generated guest whose physical memory is fragmented, with the hints a save would collect and the accesses a
// restore would see. Used by the engine's locality tests and the replay benchmark.
//
// What it models: a guest that has run for a while. Low physical memory holds the kernel (contiguous). The rest
// of the frames were handed out from scrambled free lists in extents of 1..max_extent_pages frames, so a process's
// virtual ranges (text, heap, anonymous mappings, stack) are backed by frames scattered all over physical memory,
// interleaved with the page cache and with free (zero) frames. Some processes are active: each has hot virtual
// ranges. During the save, the scheduler runs the active processes in time slices and each touches its hot ranges
// in address order (plus some kernel pages): that is the save-time access trace. The VA hints list, per process,
// the frames behind its virtual ranges in virtual-address order (runs of frames, a blank line between address
// spaces), as a guest agent or a page-table walk would report them.
//
// The restore-time trace is the same workload resumed after the restore: the active processes touch most of
// their hot ranges again (restore_overlap of them), in a different interleaving, go a little further than at save
// time (restore_new_fraction: the virtual pages right after hot ranges, which were not accessed during the save
// but are VA-adjacent to pages that were), and allocate fresh memory (restore_zero_fraction: touches of free, zero
// frames). Some touches are writes. Physical page numbers are those of region "ram".
#ifndef HALITE_TESTS_FRAGMENTED_GUEST_H_
#define HALITE_TESTS_FRAGMENTED_GUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::testing {

struct FragmentedGuestOptions {
  uint64_t pages = 65536;  // guest physical memory in 4 KiB pages (256 MiB)
  uint64_t seed = 1;
  uint32_t processes = 24;
  uint32_t active_processes = 6;
  double kernel_fraction = 0.04;       // contiguous at the bottom of memory
  double page_cache_fraction = 0.15;   // file pages, scattered
  double process_fraction = 0.46;      // process memory, scattered; what remains is free (zero)
  uint32_t max_extent_pages = 8;       // frames handed out together (buddy orders 0..3)
  double heap_zero_fraction = 0.08;    // process pages allocated but never written (zero)
  double hot_fraction = 0.2;           // of an active process's pages: touched during the save
  double kernel_hot_fraction = 0.1;    // of the kernel's pages
  double restore_overlap = 0.9;        // of the save-time hot ranges, touched again at restore
  double restore_new_fraction = 0.1;   // extra pages after hot ranges, relative to the hot pages touched again
  double restore_zero_fraction = 0.1;  // touches of free frames, relative to the hot pages touched again
  double write_fraction = 0.3;
  uint32_t slice_pages = 48;  // pages a process touches before the scheduler switches
};

struct GuestAccess {
  uint64_t page = 0;
  bool write = false;
};

struct FragmentedGuest {
  std::vector<uint8_t> image;                    // pages * 4096 bytes
  std::vector<uint64_t> save_trace;              // pages in the order first touched during the save (zero ones too)
  std::vector<std::vector<uint64_t>> va_spaces;  // per process: its frames in virtual-address order
  std::vector<GuestAccess> restore_trace;        // the accesses after the restore, in order (repeats included)

  // What was generated, for test messages and the benchmark's description.
  uint64_t zero_pages = 0;
  uint64_t save_hot_pages = 0;    // distinct pages in save_trace
  uint64_t restore_distinct = 0;  // distinct pages in restore_trace
  uint64_t restore_nonzero = 0;   // ... of which non-zero
  uint64_t restore_in_save = 0;   // ... of which in save_trace

  // The hint and trace files (format-spec/hint-files.md).
  std::string SaveTraceText() const;
  std::string VaHintsText() const;
  std::string RestoreTraceText() const;
  std::string Describe() const;
  // Writes image, save.trace, va.hints and restore.trace into `dir`.
  Status WriteFiles(const std::string& dir) const;
};

FragmentedGuest GenerateFragmentedGuest(const FragmentedGuestOptions& options);

}  // namespace halite::testing

#endif  // HALITE_TESTS_FRAGMENTED_GUEST_H_
