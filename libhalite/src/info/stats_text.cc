// HumanBytes and BlockCacheSummary (moved here from tools/common/cli.cc), WriteSummaryText (from
// tools/hlt-save/writer_flags.cc), unchanged.
#include "halite/stats_text.h"

#include <cstdio>

#include <fmt/format.h>
#include <fmt/printf.h>

#include "halite/encryption.h"

namespace halite {

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string HexBytes(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::string BlockCacheSummary(const ReaderStats& st) {
  if (st.cache_hits + st.cache_misses + st.cache_dropped == 0) return {};
  std::string s = fmt::format("{} blocks from the block cache, {} fetched ({})", st.cache_hits, st.blocks_fetched,
                              HumanBytes(st.block_bytes_fetched));
  if (st.cache_dropped) s += fmt::format(", {} damaged cache entries dropped", st.cache_dropped);
  return s;
}

std::string WriteSummaryText(const WriteSummary& s, const std::string& path) {
  std::string out;
  out += fmt::sprintf("saved %s\n", path.c_str());
  out += fmt::sprintf("  pages            %llu (%s)\n", (unsigned long long)s.pages, HumanBytes(s.raw_bytes).c_str());
  out += fmt::sprintf("  zero pages       %llu\n", (unsigned long long)s.zero_pages);
  out += fmt::sprintf("  absent pages     %llu\n", (unsigned long long)s.absent_pages);
  out += fmt::sprintf("  duplicate pages  %llu\n", (unsigned long long)s.duplicate_pages);
  out += fmt::sprintf("  stored pages     %llu (%llu of them in the working set)\n", (unsigned long long)s.stored_pages,
              (unsigned long long)s.accessed_pages);
  out += fmt::sprintf("  blocks           %llu (%llu hot)\n", (unsigned long long)s.blocks, (unsigned long long)s.hot_blocks);
  out += fmt::sprintf("  stored bytes     %llu (%s; blocks %s, blobs %s, index %s, dictionary %s)\n",
              (unsigned long long)s.file_bytes, HumanBytes(s.file_bytes).c_str(),
              HumanBytes(s.block_bytes).c_str(), HumanBytes(s.blob_bytes).c_str(),
              HumanBytes(s.index_bytes).c_str(), HumanBytes(s.dictionary_bytes).c_str());
  if (s.in_parent_pages > 0) {
    out += fmt::sprintf("  in parent        %llu pages (stored as references; %llu parent blocks decoded to compare)\n",
                (unsigned long long)s.in_parent_pages, (unsigned long long)s.parent_blocks_read);
    if (s.stored_again_pages > 0) {
      out += fmt::sprintf("  stored again     %llu pages equal to the parent's, to keep blocks whole (--rewrite-fraction)\n",
                  (unsigned long long)s.stored_again_pages);
    }
    if (s.declared_in_parent_pages > 0) {
      out += fmt::sprintf("  known unwritten  %llu of them (the page map of a private mapping of the parent's image: not read)\n",
                  (unsigned long long)s.declared_in_parent_pages);
    }
  }
  if (s.page_hash_bytes > 0) out += fmt::sprintf("  page hashes      %s\n", HumanBytes(s.page_hash_bytes).c_str());
  out += fmt::sprintf("  coding           %s, %s\n",
              s.frame_pages ? ("frames of " + std::to_string(s.frame_pages) + " pages").c_str() : "one frame a block",
              s.dictionary_bytes ? ("a dictionary of " + HumanBytes(s.dictionary_bytes)).c_str() : "no dictionary");
  if (!s.coding_reason.empty()) out += fmt::sprintf("  why              %s\n", s.coding_reason.c_str());
  if (s.base_groups_tried > 0) {
    out += fmt::sprintf("  against parent   %llu blocks (%llu pages) coded against the parent: %llu of the %llu parent block\n"
                "                   groups holding a changed page's old version and read anyway paid in a trial\n",
                (unsigned long long)s.based_blocks, (unsigned long long)s.based_pages,
                (unsigned long long)s.base_groups_used, (unsigned long long)s.base_groups_tried);
  }
  if (s.encrypted) {
    out += fmt::sprintf("  encrypted        %s, key id %s\n", CipherName(s.cipher), KeyIdHex(s.key_id).c_str());
  }
  out += fmt::sprintf("  ratio            %.2f\n", s.ratio());
  out += fmt::sprintf("  seconds          %.3f (%.0f MB/s of raw pages)\n", s.seconds,
              s.seconds > 0 ? double(s.raw_bytes) / s.seconds / 1e6 : 0.0);
  return out;
}

}  // namespace halite
