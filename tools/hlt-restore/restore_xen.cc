// hlt-restore xen CKPT -o STREAM [--key-file K] [--xen-417-order] [--cache-mb N] [--no-sync]
// Writes the Xen save stream a checkpoint was made from, for `xl restore` (a file, a FIFO, or - for stdout).
#include <cstdio>
#include <iostream>

#include "halite/checkpoint_reader.h"
#include "halite/xen/xen_checkpoint.h"
#include "halite/xen/xen_report.h"
#include "common/cli_parser.h"
#include "hlt-restore/restore_modes.h"

namespace halite::restore {

int RestoreXen(cli::Args& args) {
  const std::string tool = "hlt-restore xen";
  const std::string usage =
      std::string("usage: hlt-restore xen CKPT -o STREAM [--key-file K] [--xen-417-order] [--cache-mb N] [--no-sync]\n"
                  "Writes the Xen save stream the checkpoint was made from (`hlt-save xen`), for `xl restore`.\n"
                  "STREAM is a file (created atomically: nothing is left when the export fails), an existing FIFO,\n"
                  "or - for standard output. Records keep the order they had; pages are written once each. A file of an\n"
                  "encrypted checkpoint's stream holds the guest's memory in the clear: written only with\n"
                  "--plaintext-output (a FIFO or standard output streams it to xl restore without resting anywhere).\n") +
      cli::kReaderFlagsHelp +
      "  --xen-417-order        rewrite records in the order Xen 4.17's saver writes them\n"
      "  --cache-mb N           decoded blocks kept while writing (default 64)\n"
      "  --no-sync              do not fsync the output file\n";
  std::string ckpt, out, cache_mb;
  ReaderOptions reader_options;
  xen::ExportOptions opt;
  bool no_sync = false, plaintext_output = false;
  cli::Parser p(tool, usage);
  cli::ReaderFlagValues reader_flags;
  p.app().add_option("CKPT", ckpt);
  p.app().add_option("-o,--output", out);
  p.app().add_flag("--xen-417-order", opt.reorder_like_xen417);
  p.app().add_option("--cache-mb", cache_mb);
  p.app().add_flag("--no-sync", no_sync);
  p.app().add_flag("--plaintext-output", plaintext_output);
  p.AddReaderFlags(&reader_flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  const bool sync = !no_sync;
  if (p.app().count("--cache-mb")) {
    uint64_t n = 0;
    if (!cli::ParseU64(cache_mb, &n) || n == 0 || n > (1u << 20)) return p.UsageError("--cache-mb: bad value");
    opt.cache_bytes = n << 20;
  }
  if (ckpt.empty() || out.empty()) return p.UsageError("CKPT and -o STREAM are required");

  if (int rc = p.FinishReaderFlags(reader_flags, &reader_options); rc >= 0) return rc;
  auto reader = CheckpointReader::Open(ckpt, reader_options);
  if (!reader) return cli::Fail(tool, reader.error());

  const bool to_stdout = out == "-";
  if ((*reader)->encrypted() && !xen::StreamsToPath(out) && !plaintext_output) {
    return cli::UsageError(tool, ckpt + " is encrypted: the file " + out + " would hold the guest's memory in the "
                                 "clear (stream it through a FIFO or -, or give --plaintext-output)", usage);
  }
  xen::ExportStats stats;
  Status s = xen::ExportCheckpointToPath(**reader, out, sync, opt, &stats);
  if (!s.ok()) return cli::Fail(tool, s);
  // With the stream on stdout, the report goes to stderr.
  std::FILE* report = to_stdout ? stderr : stdout;
  std::fputs(xen::XenExportReportText(ckpt, out, stats).c_str(), report);
  return cli::kExitOk;
}

}  // namespace halite::restore
