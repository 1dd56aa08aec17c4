// hlt-restore info CKPT [--json]
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "halite/checkpoint_reader.h"
#include "halite/format_constants.h"
#include "common/cli_parser.h"
#include "hlt-restore/restore_modes.h"

namespace halite::restore {
namespace {

struct Counts {
  uint64_t absent = 0, zero = 0, stored = 0, duplicates = 0, slots = 0;
  uint64_t block_bytes = 0, blob_bytes = 0, compressed_blocks = 0, dict_blocks = 0, framed_blocks = 0, hot_blocks = 0;
  uint32_t min_stored = UINT32_MAX, max_stored = 0, min_pages = UINT32_MAX, max_pages = 0;
};

Counts Count(const CheckpointReader& r) {
  Counts c;
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

std::string HexId(const std::array<uint8_t, 16>& id) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", id[0], id[1],
                id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13], id[14], id[15]);
  return buf;
}

// Format-spec 12: each file of the chain, with what it holds and what this checkpoint takes from it.
void PrintChain(const CheckpointReader& r) {
  const auto& chain = r.chain();
  if (chain.size() < 2) {
    std::printf("chain        none (a full checkpoint)\n");
    return;
  }
  uint64_t total = 0;
  for (const auto& l : chain) total += l.file_size;
  std::printf("chain        %zu files, %u parent links, %s in all\n", chain.size(), r.chain_depth(),
              cli::HumanBytes(total).c_str());
  for (size_t i = 0; i < chain.size(); ++i) {
    const ChainLevel& l = chain[i];
    std::printf("  %zu %-28s format 1.%u, %s, file id %s\n", i, l.name.c_str(), l.format_minor,
                cli::HumanBytes(l.file_size).c_str(), HexId(l.file_id).c_str());
    std::printf("    blocks %llu (%s stored; %llu coded against the parent); serves %llu pages from %llu of them%s%s%s\n",
                (unsigned long long)l.blocks, cli::HumanBytes(l.block_bytes).c_str(),
                (unsigned long long)l.based_blocks, (unsigned long long)l.pages, (unsigned long long)l.live_blocks,
                l.path_hint.empty() ? "" : "; parent \"", l.path_hint.c_str(), l.path_hint.empty() ? "" : "\"");
  }
}

// Pages by the regions: a reader opened without its key has no page map (format-spec 13.7).
uint64_t RegionPages(const CheckpointReader& r) {
  uint64_t n = 0;
  for (const auto& reg : r.regions()) n += reg.page_count();
  return n;
}

std::string EncryptionText(const CheckpointReader& r) {
  if (!r.encrypted()) return "no";
  return std::string(CipherName(r.cipher())) + ", key id " + KeyIdHex(r.key_id()) +
         (r.sealed() ? " (no key given: the page map, dictionary, page hashes and contents are sealed)" : "");
}

std::string TrialText(const CodingRecord::Trial& t) {
  return (t.frame_pages ? fmt::format("frames of {}", t.frame_pages) : std::string("one frame")) +
         (t.dictionary_bytes ? fmt::format(" with a {} KiB dictionary", t.dictionary_bytes / 1024) : std::string()) +
         fmt::format(" {:.2f} MB", double(t.estimate) / 1e6);
}

// Format-spec 5.12: how the writer chose the coding, when it recorded it.
void PrintCoding(const CheckpointReader& r) {
  const auto& c = r.coding();
  if (!c) {
    std::printf("coding       not recorded (fixed by the writer's options, or written before format 1.4)\n");
    return;
  }
  std::printf("coding       %s, %s; chosen by the writer from %u sample blocks (%.1f MiB), file estimated:\n",
              c->frame_pages ? fmt::format("frames of {} pages", c->frame_pages).c_str() : "one frame a block",
              r.dictionary_size() ? fmt::format("a {} KiB dictionary", r.dictionary_size() / 1024).c_str()
                                  : "no dictionary",
              c->sample_blocks, double(c->sample_raw_bytes) / 1048576.0);
  for (const auto& t : c->trials) std::printf("               %s\n", TrialText(t).c_str());
  if (c->base_groups_tried > 0) {
    std::printf("               against the parent: %u of the %u parent block groups holding a changed page's old "
                "version (and read anyway) paid in a trial\n",
                c->base_groups_used, c->base_groups_tried);
  }
}

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

void PrintText(const CheckpointReader& r, const Counts& c) {
  const Metadata& m = r.metadata();
  uint64_t raw = RegionPages(r) * 4096;
  std::printf("checkpoint   %s\n", r.name().c_str());
  std::printf("format       %u.%u, %llu bytes, file id %s\n", r.format_major(), r.format_minor(),
              (unsigned long long)r.file_size(), HexId(r.file_id()).c_str());
  std::printf("vmm          %s, machine \"%s\", creator \"%s\", vm uuid %s, created %llu ns\n",
              VmmKindName(m.vmm_kind), m.machine_type.c_str(), m.creator.c_str(), HexId(m.vm_uuid).c_str(),
              (unsigned long long)m.created_unix_ns);
  std::printf("regions      %zu\n", r.regions().size());
  for (const auto& reg : r.regions()) {
    std::printf("  %-24s base 0x%llx size %s (%llu pages, host page %u)\n", reg.name.c_str(),
                (unsigned long long)reg.guest_phys_base, cli::HumanBytes(reg.size).c_str(),
                (unsigned long long)reg.page_count(), reg.host_page_size);
  }
  if (r.sealed()) {
    std::printf("pages        %llu: which are stored, zero or absent is sealed (key id %s)\n",
                (unsigned long long)RegionPages(r), KeyIdHex(r.key_id()).c_str());
  } else {
    std::printf("pages        %llu: stored %llu (%llu duplicates), zero %llu, absent %llu\n",
                (unsigned long long)r.total_pages(), (unsigned long long)c.stored, (unsigned long long)c.duplicates,
                (unsigned long long)c.zero, (unsigned long long)c.absent);
  }
  std::printf("size         raw %s, file %s, ratio %.2f\n", cli::HumanBytes(raw).c_str(),
              cli::HumanBytes(r.file_size()).c_str(), r.file_size() ? double(raw) / double(r.file_size()) : 0.0);
  std::printf("blocks       %zu (%llu compressed, %llu of independent frames, %llu with dictionary, %llu hot); pages "
              "per block %u..%u; stored bytes %u..%u, mean %.0f\n",
              r.blocks().size(), (unsigned long long)c.compressed_blocks, (unsigned long long)c.framed_blocks,
              (unsigned long long)c.dict_blocks,
              (unsigned long long)c.hot_blocks, c.min_pages, c.max_pages, c.min_stored, c.max_stored,
              r.blocks().empty() ? 0.0 : double(c.block_bytes) / double(r.blocks().size()));
  std::printf("dictionary   %zu bytes\n", r.dictionary_size());
  PrintCoding(r);
  std::printf("authenticated %s\n", r.authenticated() ? "yes (keyed BLAKE2b MAC)" : "no");
  std::printf("encrypted    %s\n", EncryptionText(r).c_str());
  std::printf("blobs        %zu (%s stored)\n", r.blobs().size(), cli::HumanBytes(c.blob_bytes).c_str());
  for (const auto& b : r.blobs()) {
    std::printf("  %-24s %llu bytes (%llu stored)\n", b.name.c_str(), (unsigned long long)b.raw_length,
                (unsigned long long)b.stored_length);
  }
  std::printf("hints        restore order of %zu blocks, working set %u blocks\n", r.restore_order().size(),
              r.working_set_blocks());
  std::printf("index        %llu bytes at offset 0x%llx%s\n", (unsigned long long)r.index_length(),
              (unsigned long long)r.index_offset(), r.has_page_hashes() ? ", with PAGE_HASHES" : "");
  PrintChain(r);
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

void PrintJson(const CheckpointReader& r, const Counts& c) {
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
  std::cout << cli::JsonText(j);
}

}  // namespace

int Info(cli::Args& args) {
  const std::string tool = "hlt-restore info";
  const std::string usage = std::string("usage: hlt-restore info CKPT [--json] [--key-file K] [--parent-dir DIR]\n") +
                            "An incremental checkpoint is shown with its chain: each file's blocks, bytes and the pages it serves.\n" +
                            "An encrypted one without its key shows what is not sealed (format-spec 13.4): layout, sizes, blobs.\n" +
                            cli::kReaderFlagsHelp;
  std::string ckpt;
  bool json = false;
  ReaderOptions reader_options;
  reader_options.open_without_key = true;  // format-spec 13.7: what can be shown without the key
  cli::Parser p(tool, usage);
  cli::ReaderFlagValues reader_flags;
  p.app().add_option("CKPT", ckpt);
  p.app().add_flag("--json", json);
  p.AddReaderFlags(&reader_flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (ckpt.empty()) return p.UsageError("CKPT is required");
  if (int rc = p.FinishReaderFlags(reader_flags, &reader_options); rc >= 0) return rc;
  auto reader = CheckpointReader::Open(ckpt, reader_options);
  if (!reader) return cli::Fail(tool, reader.error());
  Counts c = Count(**reader);
  if (json) PrintJson(**reader, c); else PrintText(**reader, c);
  return 0;
}

}  // namespace halite::restore
