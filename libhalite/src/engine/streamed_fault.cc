// A demand fault's block, decoded piece by piece: the faulting page goes in (and its thread wakes) as soon as
// its piece is decoded, not after the whole block is decoded and installed (bench/engine/README.md: ~410 us
// warm for a 64-page block before, of which ~105 us installing pages the thread was not waiting for and the
// decoding of every piece after its page's).
//
// The promises to the sink hold as in InstallMembers: the block's pages are claimed once, before any is
// installed; each goes in one run of one Install call (the faulting page alone, then what was decoded before
// and with it, then each further piece);
// bytes are installed only after the payload's checksum (and MAC) verified.
#include <algorithm>

#include "engine/engine_impl.h"

namespace halite {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

Status RestoreEngine::Impl::StreamBlock(uint32_t b, uint64_t fault_page, uint64_t fault_ns, uint64_t* page_in_ns) {
  const BlockInfo& info = reader_.blocks()[b];
  thread_local std::vector<uint8_t> raw;
  thread_local std::vector<Todo> todo;      // this call's pages, in slot (decode) order
  thread_local std::vector<uint8_t> offered;  // per todo entry: offered to the sink (or skipped as present)
  thread_local std::vector<uint16_t> slot_bytes;  // per slot of the block: bytes decoded so far (4096 = ready)
  thread_local std::vector<Todo> batch;     // one Install call's pages, in page order
  thread_local std::vector<uint8_t> staging;
  raw.resize(info.raw_length());
  slot_bytes.assign(info.page_count, 0);
  todo.clear();
  size_t fault_at = SIZE_MAX;  // index in todo of the faulting page
  uint64_t fault_slot = 0;
  for (const BlockMember& m : reader_.BlockMembers(b)) {
    if (m.page == fault_page) fault_slot = m.slot;
    if (!claimed_.TrySet(m.page)) continue;  // installed or being installed through another path
    if (m.page == fault_page) fault_at = todo.size();
    todo.push_back({m.page, m.slot});
  }
  offered.assign(todo.size(), 0);
  bool fault_offered = fault_at == SIZE_MAX;
  bool sink_failed = false;
  bool counted = false;
  uint64_t decoded = 0, install_ns = 0;
  // Pages the sink already has are counted as installed, never offered (asked just before each piece).
  auto take = [&](const Todo& t) {
    if (!sink_.IsPresent(RefOf(t.g))) return true;
    installed_.Set(t.g);
    c_.pages_skipped_present.fetch_add(1, std::memory_order_relaxed);
    return false;
  };
  auto install = [&](std::span<const Todo> pages) {
    if (pages.empty()) return Status::Ok();
    uint64_t t = NowNs();
    Status s = InstallRuns(pages, raw, staging, InstallPriority::kUrgent);
    install_ns += NowNs() - t;
    sink_failed = !s.ok();
    // Faults on this block's other pages wait for their own page only (EnsureBlock): tell them.
    NotifyPagesIn(b);
    return s;
  };
  auto ready = [&](const Todo& t) { return slot_bytes[t.slot] == kPage; };
  CheckpointReader::BlockProgress progress = [&](size_t begin, size_t end) -> Status {
    // A range need not end on a page boundary (zstd's own blocks in files of other writers): count bytes per slot.
    for (uint64_t slot = begin / kPage; slot * kPage < end; ++slot) {
      slot_bytes[slot] += uint16_t(std::min<uint64_t>(end, (slot + 1) * kPage) - std::max<uint64_t>(begin, slot * kPage));
    }
    decoded += end - begin;
    if (decoded >= raw.size() && !counted) {
      // Decoded whole: count the read before the last pages go in, as LoadBlock does before installing, so that
      // a thread woken by those pages never sees its block missing from the statistics.
      CountBlockRead(b, Cause::kDemand);
      counted = true;
    }
    if (!fault_offered) {
      // Nothing goes in before the faulting page: each install before it would delay its thread's wake-up.
      if (!ready(todo[fault_at])) return Status::Ok();
      fault_offered = true;
      offered[fault_at] = 1;
      batch.clear();
      if (take(todo[fault_at])) batch.push_back(todo[fault_at]);
      HLT_RETURN_IF_ERROR(install(batch));
      const uint64_t now = NowNs();
      wake_hist_.Record(now - fault_ns);
      if (page_in_ns) *page_in_ns = now;
    }
    batch.clear();
    for (size_t k = 0; k < todo.size(); ++k) {
      if (offered[k] || !ready(todo[k])) continue;
      offered[k] = 1;
      if (take(todo[k])) batch.push_back(todo[k]);
    }
    // In page order, so that pages adjacent in guest memory go in one run.
    std::sort(batch.begin(), batch.end(), [](const Todo& x, const Todo& y) { return x.g < y.g; });
    return install(batch);
  };

  uint64_t t_read = NowNs();
  // A block of independent frames decodes the faulting page's frame first.
  Status s = ReadWithRetries(b, raw, &progress, size_t(fault_slot) * kPage);
  uint64_t t_end = NowNs();
  c_.read_ns.fetch_add(t_end - t_read - install_ns, std::memory_order_relaxed);
  c_.install_ns.fetch_add(install_ns, std::memory_order_relaxed);
  if (!s.ok()) {
    // Release the claims never offered (InstallRuns released those of a failed call itself), so a later load of
    // the block offers them again.
    for (size_t k = 0; k < todo.size(); ++k) {
      if (!offered[k]) claimed_.Clear(todo[k].g);
    }
    if (sink_failed) {
      SetBlockState(b, kNotLoaded);
      return s.WithContext("installing block " + std::to_string(b));
    }
    return BlockReadFailed(b, s);
  }
  if (!counted) CountBlockRead(b, Cause::kDemand);
  c_.blocks_loaded.fetch_add(1, std::memory_order_relaxed);
  SetBlockState(b, kLoaded);
  return Status::Ok();
}

}  // namespace halite
