// hlt-restore info CKPT [--json]: the text form here; the counts and the JSON document are the library's
// (halite/checkpoint_info.h), shared with the C API.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "halite/checkpoint_info.h"
#include "halite/checkpoint_reader.h"
#include "halite/format_constants.h"
#include "common/cli_parser.h"
#include "hlt-restore/restore_modes.h"

namespace halite::restore {
namespace {

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

void PrintText(const CheckpointReader& r, const CheckpointCounts& c) {
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
  const CheckpointCounts c = CountCheckpoint(**reader);
  if (json) std::cout << CheckpointInfoJson(**reader, c); else PrintText(**reader, c);
  return 0;
}

}  // namespace halite::restore
