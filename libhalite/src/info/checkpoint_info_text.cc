// The text form of `hlt-restore info` (moved here from tools/hlt-restore/info.cc, unchanged).
#include <fmt/format.h>
#include <fmt/printf.h>

#include "halite/checkpoint_info.h"
#include "halite/encryption.h"
#include "halite/format_constants.h"
#include "halite/stats_text.h"

namespace halite {
namespace {

// Format-spec 12: each file of the chain, with what it holds and what this checkpoint takes from it.
void AppendChain(const CheckpointReader& r, std::string& out) {
  const auto& chain = r.chain();
  if (chain.size() < 2) {
    out += fmt::sprintf("chain        none (a full checkpoint)\n");
    return;
  }
  uint64_t total = 0;
  for (const auto& l : chain) total += l.file_size;
  out += fmt::sprintf("chain        %zu files, %u parent links, %s in all\n", chain.size(), r.chain_depth(),
              HumanBytes(total).c_str());
  for (size_t i = 0; i < chain.size(); ++i) {
    const ChainLevel& l = chain[i];
    out += fmt::sprintf("  %zu %-28s format 1.%u, %s, file id %s\n", i, l.name.c_str(), l.format_minor,
                HumanBytes(l.file_size).c_str(), HexId(l.file_id).c_str());
    out += fmt::sprintf("    blocks %llu (%s stored; %llu coded against the parent); serves %llu pages from %llu of them%s%s%s\n",
                (unsigned long long)l.blocks, HumanBytes(l.block_bytes).c_str(),
                (unsigned long long)l.based_blocks, (unsigned long long)l.pages, (unsigned long long)l.live_blocks,
                l.path_hint.empty() ? "" : "; parent \"", l.path_hint.c_str(), l.path_hint.empty() ? "" : "\"");
  }
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
void AppendCoding(const CheckpointReader& r, std::string& out) {
  const auto& c = r.coding();
  if (!c) {
    out += fmt::sprintf("coding       not recorded (fixed by the writer's options, or written before format 1.4)\n");
    return;
  }
  out += fmt::sprintf("coding       %s, %s; chosen by the writer from %u sample blocks (%.1f MiB), file estimated:\n",
              c->frame_pages ? fmt::format("frames of {} pages", c->frame_pages).c_str() : "one frame a block",
              r.dictionary_size() ? fmt::format("a {} KiB dictionary", r.dictionary_size() / 1024).c_str()
                                  : "no dictionary",
              c->sample_blocks, double(c->sample_raw_bytes) / 1048576.0);
  for (const auto& t : c->trials) out += fmt::sprintf("               %s\n", TrialText(t).c_str());
  if (c->base_groups_tried > 0) {
    out += fmt::sprintf("               against the parent: %u of the %u parent block groups holding a changed page's old "
                "version (and read anyway) paid in a trial\n",
                c->base_groups_used, c->base_groups_tried);
  }
}

}  // namespace

std::string CheckpointInfoText(const CheckpointReader& r, const CheckpointCounts& c) {
  std::string out;
  const Metadata& m = r.metadata();
  uint64_t raw = RegionPages(r) * 4096;
  out += fmt::sprintf("checkpoint   %s\n", r.name().c_str());
  out += fmt::sprintf("format       %u.%u, %llu bytes, file id %s\n", r.format_major(), r.format_minor(),
              (unsigned long long)r.file_size(), HexId(r.file_id()).c_str());
  out += fmt::sprintf("vmm          %s, machine \"%s\", creator \"%s\", vm uuid %s, created %llu ns\n",
              VmmKindName(m.vmm_kind), m.machine_type.c_str(), m.creator.c_str(), HexId(m.vm_uuid).c_str(),
              (unsigned long long)m.created_unix_ns);
  out += fmt::sprintf("regions      %zu\n", r.regions().size());
  for (const auto& reg : r.regions()) {
    out += fmt::sprintf("  %-24s base 0x%llx size %s (%llu pages, host page %u)\n", reg.name.c_str(),
                (unsigned long long)reg.guest_phys_base, HumanBytes(reg.size).c_str(),
                (unsigned long long)reg.page_count(), reg.host_page_size);
  }
  if (r.sealed()) {
    out += fmt::sprintf("pages        %llu: which are stored, zero or absent is sealed (key id %s)\n",
                (unsigned long long)RegionPages(r), KeyIdHex(r.key_id()).c_str());
  } else {
    out += fmt::sprintf("pages        %llu: stored %llu (%llu duplicates), zero %llu, absent %llu\n",
                (unsigned long long)r.total_pages(), (unsigned long long)c.stored, (unsigned long long)c.duplicates,
                (unsigned long long)c.zero, (unsigned long long)c.absent);
  }
  out += fmt::sprintf("size         raw %s, file %s, ratio %.2f\n", HumanBytes(raw).c_str(),
              HumanBytes(r.file_size()).c_str(), r.file_size() ? double(raw) / double(r.file_size()) : 0.0);
  out += fmt::sprintf("blocks       %zu (%llu compressed, %llu of independent frames, %llu with dictionary, %llu hot); pages "
              "per block %u..%u; stored bytes %u..%u, mean %.0f\n",
              r.blocks().size(), (unsigned long long)c.compressed_blocks, (unsigned long long)c.framed_blocks,
              (unsigned long long)c.dict_blocks,
              (unsigned long long)c.hot_blocks, c.min_pages, c.max_pages, c.min_stored, c.max_stored,
              r.blocks().empty() ? 0.0 : double(c.block_bytes) / double(r.blocks().size()));
  out += fmt::sprintf("dictionary   %zu bytes\n", r.dictionary_size());
  AppendCoding(r, out);
  out += fmt::sprintf("authenticated %s\n", r.authenticated() ? "yes (keyed BLAKE2b MAC)" : "no");
  out += fmt::sprintf("encrypted    %s\n", EncryptionText(r).c_str());
  out += fmt::sprintf("blobs        %zu (%s stored)\n", r.blobs().size(), HumanBytes(c.blob_bytes).c_str());
  for (const auto& b : r.blobs()) {
    out += fmt::sprintf("  %-24s %llu bytes (%llu stored)\n", b.name.c_str(), (unsigned long long)b.raw_length,
                (unsigned long long)b.stored_length);
  }
  out += fmt::sprintf("hints        restore order of %zu blocks, working set %u blocks\n", r.restore_order().size(),
              r.working_set_blocks());
  out += fmt::sprintf("index        %llu bytes at offset 0x%llx%s\n", (unsigned long long)r.index_length(),
              (unsigned long long)r.index_offset(), r.has_page_hashes() ? ", with PAGE_HASHES" : "");
  AppendChain(r, out);
  return out;
}

}  // namespace halite
