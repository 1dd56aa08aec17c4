// CheckpointCounts and the `info --json` document (moved here from tools/hlt-restore/info.cc, unchanged).
#include "halite/checkpoint_info.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "halite/format_constants.h"

namespace halite {

CheckpointCounts CountCheckpoint(const CheckpointReader& r) {
  CheckpointCounts c;
  for (uint64_t g = 0; g < r.total_pages(); ++g) {
    switch (r.Locate(g).kind) {
      case PageKind::kAbsent: ++c.absent; break;
      case PageKind::kZero: ++c.zero; break;
      case PageKind::kStored: ++c.stored; break;
    }
  }
  // Distinct slots in use: in a chain a parent block may hold pages this checkpoint no longer takes from it.
  for (uint32_t b = 0; b < r.blocks().size(); ++b) {
    auto ms = r.BlockMembers(b);
    for (size_t i = 0; i < ms.size(); ++i) c.slots += (i == 0 || ms[i].slot != ms[i - 1].slot);
  }
  c.min_stored = c.min_pages = UINT32_MAX;
  for (const auto& b : r.blocks()) {
    c.block_bytes += b.stored_length;
    c.compressed_blocks += b.compressed();
    c.dict_blocks += b.uses_dictionary();
    c.framed_blocks += b.framed();
    c.hot_blocks += b.hot();
    c.min_stored = std::min(c.min_stored, b.stored_length);
    c.max_stored = std::max(c.max_stored, b.stored_length);
    c.min_pages = std::min(c.min_pages, b.page_count);
    c.max_pages = std::max(c.max_pages, b.page_count);
  }
  if (r.blocks().empty()) c.min_stored = c.min_pages = 0;
  c.duplicates = c.stored - c.slots;
  for (const auto& b : r.blobs()) c.blob_bytes += b.stored_length;
  return c;
}

uint64_t RegionPages(const CheckpointReader& r) {
  uint64_t n = 0;
  for (const auto& reg : r.regions()) n += reg.page_count();
  return n;
}

std::string HexId(const std::array<uint8_t, 16>& id) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", id[0], id[1],
                id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13], id[14], id[15]);
  return buf;
}

namespace {

nlohmann::ordered_json CodingJson(const CheckpointReader& r) {
  const auto& c = r.coding();
  if (!c) return nullptr;
  nlohmann::ordered_json trials = nlohmann::ordered_json::array();
  for (const auto& t : c->trials) {
    trials.push_back({{"frame_pages", t.frame_pages},
                      {"dictionary_bytes", t.dictionary_bytes},
                      {"sample_bytes", t.sample_bytes},
                      {"estimated_block_bytes", t.estimate}});
  }
  return {{"frame_pages", c->frame_pages},
          {"dictionary_bytes", r.dictionary_size()},
          {"sample_blocks", c->sample_blocks},
          {"sample_raw_bytes", c->sample_raw_bytes},
          {"trials", std::move(trials)},
          {"base_groups_tried", c->base_groups_tried},
          {"base_groups_used", c->base_groups_used}};
}

nlohmann::ordered_json ChainJson(const CheckpointReader& r) {
  nlohmann::ordered_json chain = nlohmann::ordered_json::array();
  for (const ChainLevel& l : r.chain()) {
    chain.push_back({{"file", l.name},
                     {"file_id", HexId(l.file_id)},
                     {"format_version", fmt::format("1.{}", l.format_minor)},
                     {"file_size", l.file_size},
                     {"chain_depth", l.chain_depth},
                     {"blocks", l.blocks},
                     {"block_bytes", l.block_bytes},
                     {"live_blocks", l.live_blocks},
                     {"framed_blocks", l.framed_blocks},
                     {"dictionary_blocks", l.dictionary_blocks},
                     {"based_blocks", l.based_blocks},
                     {"dictionary_bytes", l.dictionary_bytes},
                     {"pages", l.pages},
                     {"parent_path_hint", l.path_hint}});
  }
  return chain;
}

}  // namespace

std::string CheckpointInfoJson(const CheckpointReader& r, const CheckpointCounts& c) {
  const Metadata& m = r.metadata();
  const uint64_t raw = RegionPages(r) * format::kPageSize;
  nlohmann::ordered_json regions = nlohmann::ordered_json::array(), blobs = nlohmann::ordered_json::array();
  for (const auto& reg : r.regions()) {
    regions.push_back({{"name", reg.name},
                       {"guest_phys_base", reg.guest_phys_base},
                       {"size", reg.size},
                       {"pages", reg.page_count()},
                       {"host_page_size", reg.host_page_size}});
  }
  for (const auto& b : r.blobs()) {
    blobs.push_back({{"name", b.name}, {"raw_length", b.raw_length}, {"stored_length", b.stored_length}});
  }
  nlohmann::ordered_json j = {
      {"file", r.name()},
      {"format_version", fmt::format("{}.{}", r.format_major(), r.format_minor())},
      {"file_size", r.file_size()},
      {"file_id", HexId(r.file_id())},
      {"vmm_kind", VmmKindName(m.vmm_kind)},
      {"machine_type", m.machine_type},
      {"creator", m.creator},
      {"vm_uuid", HexId(m.vm_uuid)},
      {"created_unix_ns", m.created_unix_ns},
      {"regions", std::move(regions)},
      {"pages", RegionPages(r)},
      {"stored_pages", c.stored},
      {"duplicate_pages", c.duplicates},
      {"zero_pages", c.zero},
      {"absent_pages", c.absent},
      {"raw_bytes", raw},
      {"ratio", r.file_size() ? double(raw) / double(r.file_size()) : 0.0},
      {"blocks", r.blocks().size()},
      {"compressed_blocks", c.compressed_blocks},
      {"dictionary_blocks", c.dict_blocks},
      {"framed_blocks", c.framed_blocks},
      {"hot_blocks", c.hot_blocks},
      {"block_bytes", c.block_bytes},
      {"min_block_pages", c.min_pages},
      {"max_block_pages", c.max_pages},
      {"dictionary_bytes", r.dictionary_size()},
      {"coding", CodingJson(r)},
      {"authenticated", r.authenticated()},
      {"encrypted", r.encrypted()},
      {"cipher", r.encrypted() ? CipherName(r.cipher()) : ""},
      {"key_id", r.encrypted() ? KeyIdHex(r.key_id()) : ""},
      {"sealed", r.sealed()},  // opened without its key: the page counts above are unknown (0)
      {"blobs", std::move(blobs)},
      {"restore_order_blocks", r.restore_order().size()},
      {"working_set_blocks", r.working_set_blocks()},
      {"index_bytes", r.index_length()},
      {"page_hashes", r.has_page_hashes()},
      {"chain_depth", r.chain_depth()},
      {"chain", ChainJson(r)},
  };
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace halite
