// hlt-save relayout CKPT -o NEW --access-trace FILE [writer options]: a learned layout. Re-plans an existing
// checkpoint (of any VMM) around an access trace recorded at restore time, so the next restore of the same
// workload faults in fewer blocks. Regions (names, bases, sizes, host page sizes), device-state blobs and
// metadata are kept as they are; only the grouping of pages into blocks and the restore order change.
#include <iostream>

#include "halite/authentication.h"
#include "halite/checkpoint_reader.h"
#include "hlt-save/save_modes.h"
#include "hlt-save/writer_flags.h"

namespace halite::save {
namespace {

const char* kRelayoutUsage =
    "usage: hlt-save relayout CKPT -o NEW --access-trace FILE [--input-key-file K] [writer options]\n"
    "Rewrites CKPT with the pages of the access trace (e.g. from `hlt-restore replay --record-trace`) placed\n"
    "first, in trace order; the other pages keep the order they had in CKPT. Regions, blobs and metadata are\n"
    "copied unchanged. Every block of CKPT is verified on the way.\n"
    "  --input-key-file K     CKPT is authenticated with this key (writer --key-file is for NEW)\n";

const char* kFlattenUsage =
    "usage: hlt-save flatten CKPT -o FULL [--input-key-file K] [--parent-dir DIR] [writer options]\n"
    "Writes the content of CKPT, an incremental checkpoint read through its chain (format-spec 12), as one\n"
    "self-contained checkpoint: every page CKPT's view holds, CKPT's regions, blobs and metadata; blocks in the\n"
    "order CKPT's view restores them. Every block of the chain that is used is verified on the way.\n"
    "  --input-key-file K     the chain is authenticated with this key (writer --key-file is for FULL)\n";

// The old layout as VA-style runs: blocks in restore order, each block's pages in slot order. Given after the
// new trace, it keeps whatever locality the old layout had for the pages the trace does not cover.
std::vector<PageRun> OldOrder(const CheckpointReader& r) {
  std::vector<PageRun> runs;
  for (uint32_t b : r.restore_order()) {
    for (const BlockMember& m : r.BlockMembers(b)) {
      PageRef ref = r.PageOf(m.page);
      if (!runs.empty() && runs.back().first.region == ref.region &&
          runs.back().first.page + runs.back().count == ref.page) {
        ++runs.back().count;
      } else {
        runs.push_back(PageRun{ref, 1, 0});
      }
    }
  }
  return runs;
}

// Gives the writer every page of the old checkpoint: stored pages block by block, zero pages as zero, absent
// pages not at all (they stay absent).
Status CopyPages(const CheckpointReader& r, CheckpointWriter& w) {
  std::vector<uint8_t> raw;
  for (uint32_t b = 0; b < r.blocks().size(); ++b) {
    raw.resize(r.blocks()[b].raw_length());
    HLT_RETURN_IF_ERROR(r.ReadBlock(b, raw));
    for (const BlockMember& m : r.BlockMembers(b)) {
      PageRef ref = r.PageOf(m.page);
      HLT_RETURN_IF_ERROR(
          w.PutPage(ref.region, ref.page, std::span<const uint8_t>(raw).subspan(uint64_t(m.slot) * 4096, 4096)));
    }
  }
  for (uint64_t g = 0; g < r.total_pages();) {
    if (r.Locate(g).kind != PageKind::kZero) {
      ++g;
      continue;
    }
    PageRef ref = r.PageOf(g);
    uint64_t end = g + 1;
    uint64_t region_end = r.regions()[ref.region].first_page + r.regions()[ref.region].page_count();
    while (end < region_end && r.Locate(end).kind == PageKind::kZero) ++end;
    HLT_RETURN_IF_ERROR(w.PutZeroPages(ref.region, ref.page, end - g));
    g = end;
  }
  return Status::Ok();
}

// relayout and flatten: both rewrite a checkpoint (read through its chain) as a full one; relayout around a new
// access trace.
int Rewrite(cli::Args& args, bool flatten) {
  const std::string tool = flatten ? "hlt-save flatten" : "hlt-save relayout";
  std::string usage = std::string(flatten ? kFlattenUsage : kRelayoutUsage) + kWriterFlagsHelp;
  std::string in, out, error;
  WriterFlags flags;
  ReaderOptions reader_options;
  while (!args.Done()) {
    std::string v;
    if (args.Flag("-h") || args.Flag("--help")) {
      std::cout << usage;
      return cli::kExitOk;
    }
    if (args.Option("-o", &v, &error) || args.Option("--output", &v, &error)) {
      out = v;
    } else if (args.Option("--input-key-file", &v, &error)) {
      if (error.empty()) {
        auto key = ReadMacKeyFile(v);
        if (key)
          reader_options.mac_key = *key;
        else
          error = key.error().message();
      }
    } else if (ParseWriterFlag(args, &flags, &error)) {
    } else {
      args.Positional(&in, &error);
    }
    if (!error.empty()) return cli::UsageError(tool, error, usage);
  }
  if (in.empty() || out.empty()) return cli::UsageError(tool, "CKPT and -o NEW are required", usage);
  if (!flatten && flags.access_trace.empty()) return cli::UsageError(tool, "--access-trace FILE is required", usage);
  if (!flags.parent.empty()) return cli::UsageError(tool, "--parent: the output is a full checkpoint", usage);
  reader_options.parent_dirs = flags.parent_reader.parent_dirs;
  if (Status prepared = PrepareWriter(&flags, out); !prepared.ok()) return cli::Fail(tool, prepared);
  reader_options.keyring = flags.keyring;  // the input's keys: --keyring, the environment, the command, NEW's key
  if (Status cache = cli::OpenBlockCache(flags.block_cache_dir, flags.block_cache_size, &reader_options); !cache.ok()) {
    return cli::Fail(tool, cache);
  }
  if (in == out) return cli::UsageError(tool, "NEW must differ from CKPT (CKPT is read while NEW is written)", usage);

  auto reader = CheckpointReader::Open(in, reader_options);
  if (!reader) return cli::Fail(tool, reader.error());
  const CheckpointReader& r = **reader;
  flags.options.metadata = r.metadata();  // kept as it was, creation time included
  cli::Progress progress("relayout");
  flags.options.progress = [&](const WriteProgress& p) { progress.Update(p.raw_bytes_done, p.raw_bytes_total); };
  auto writer = CheckpointWriter::Create(out, flags.options);
  if (!writer) return cli::Fail(tool, writer.error());
  CheckpointWriter& w = **writer;
  for (const Region& region : r.regions()) {
    auto added = w.AddRegion(region.name, region.guest_phys_base, region.size, region.host_page_size);
    if (!added) return cli::Fail(tool, added.error());
  }
  Status s = CopyPages(r, w);
  if (!s.ok()) return cli::Fail(tool, s);
  for (uint32_t i = 0; i < r.blobs().size(); ++i) {
    auto blob = r.ReadBlob(i);
    if (!blob) return cli::Fail(tool, blob.error());
    s = w.AddBlob(r.blobs()[i].name, *blob);
    if (!s.ok()) return cli::Fail(tool, s);
  }
  s = ApplyHintFiles(flags, w);  // the new access trace (and VA hints, if given)
  if (s.ok()) {
    std::vector<PageRun> old = OldOrder(r);
    s = w.AddVaRuns(old);
  }
  if (!s.ok()) return cli::Fail(tool, s);
  auto summary = w.Finish();
  progress.Finish();
  if (!summary) return cli::Fail(tool, summary.error());
  PrintSummary(*summary, out);
  return cli::kExitOk;
}

}  // namespace

int Relayout(cli::Args& args) { return Rewrite(args, false); }
int Flatten(cli::Args& args) { return Rewrite(args, true); }

}  // namespace halite::save
