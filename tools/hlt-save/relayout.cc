// hlt-save relayout CKPT -o NEW --access-trace FILE [writer options]: a learned layout. Re-plans an existing
// checkpoint (of any VMM) around an access trace recorded at restore time, so the next restore of the same
// workload faults in fewer blocks. Regions (names, bases, sizes, host page sizes), device-state blobs and
// metadata are kept as they are; only the grouping of pages into blocks and the restore order change.
#include <cstdio>
#include <iostream>

#include "halite/authentication.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_rewrite.h"
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

// relayout and flatten: both rewrite a checkpoint (read through its chain) as a full one; relayout around a new
// access trace.
int Rewrite(cli::Args& args, bool flatten) {
  const std::string tool = flatten ? "hlt-save flatten" : "hlt-save relayout";
  std::string usage = std::string(flatten ? kFlattenUsage : kRelayoutUsage) + kWriterFlagsHelp;
  std::string in, out, input_key_file;
  WriterFlags flags;
  ReaderOptions reader_options;
  cli::Parser p(tool, usage);
  WriterFlagText text;
  p.app().add_option("CKPT", in);
  p.app().add_option("-o,--output", out);
  p.app().add_option("--input-key-file", input_key_file);
  AddWriterFlags(p.app(), &text, &flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (p.app().count("--input-key-file")) {
    auto key = ReadMacKeyFile(input_key_file);
    if (!key) return p.UsageError(key.error().message());
    reader_options.mac_key = *key;
  }
  if (std::string bad = ApplyWriterFlags(p.app(), text, &flags); !bad.empty()) return p.UsageError(bad);
  if (in.empty() || out.empty()) return cli::UsageError(tool, "CKPT and -o NEW are required", usage);
  if (!flatten && flags.access_trace.empty()) return cli::UsageError(tool, "--access-trace FILE is required", usage);
  if (!flags.parent.empty()) return cli::UsageError(tool, "--parent: the output is a full checkpoint", usage);
  reader_options.parent_dirs = flags.parent_reader.parent_dirs;
  if (Status prepared = PrepareWriter(&flags, out); !prepared.ok()) return cli::Fail(tool, prepared);
  reader_options.keyring = flags.keyring;  // the input's keys: --keyring, the environment, the command, NEW's key
  auto cache = BlockCache::OpenChosen(flags.block_cache_dir, flags.block_cache_size);
  if (!cache) return cli::Fail(tool, cache.error());
  reader_options.block_cache = *cache;
  if (in == out) return cli::UsageError(tool, "NEW must differ from CKPT (CKPT is read while NEW is written)", usage);

  auto reader = CheckpointReader::Open(in, reader_options);
  if (!reader) return cli::Fail(tool, reader.error());
  cli::Progress progress("relayout");
  flags.options.progress = [&](const WriteProgress& p) { progress.Update(p.raw_bytes_done, p.raw_bytes_total); };
  RewriteOptions options;
  options.writer = flags.options;
  options.add_hints = [&](CheckpointWriter& w) { return flags.ApplyHints(w); };  // the new access trace
  auto summary = RewriteCheckpoint(**reader, out, std::move(options));
  progress.Finish();
  if (!summary) return cli::Fail(tool, summary.error());
  std::fputs(WriteSummaryText(*summary, out).c_str(), stdout);
  return cli::kExitOk;
}

}  // namespace

int Relayout(cli::Args& args) { return Rewrite(args, false); }
int Flatten(cli::Args& args) { return Rewrite(args, true); }

}  // namespace halite::save
