// hlt-restore raw CKPT -o IMAGE
#include <iostream>

#include "halite/checkpoint_reader.h"
#include "halite/raw_export.h"
#include "common/cli_parser.h"
#include "hlt-restore/restore_modes.h"

namespace halite::restore {

int RestoreRaw(cli::Args& args) {
  const std::string tool = "hlt-restore raw";
  const std::string usage =
      std::string("usage: hlt-restore raw CKPT -o IMAGE [--threads N] [--key-file K] [--parent-dir DIR] [--no-sync]\n"
                  "                       [--plaintext-output]\n"
                  "Writes every region of the checkpoint, in order, as one flat image. Nothing is left under IMAGE when it\n"
                  "fails. An incremental checkpoint is read through its chain. IMAGE of an encrypted checkpoint holds the\n"
                  "guest's memory in the clear: it is written only with --plaintext-output.\n") +
      cli::kReaderFlagsHelp;
  std::string ckpt, out, threads;
  RawExportOptions opt;
  ReaderOptions reader_options;
  bool plaintext_output = false, no_sync = false;
  cli::Parser p(tool, usage);
  cli::ReaderFlagValues reader_flags;
  p.app().add_option("CKPT", ckpt);
  p.app().add_option("-o,--output", out);
  p.app().add_option("--threads", threads);
  p.app().add_flag("--no-sync", no_sync);
  p.app().add_flag("--plaintext-output", plaintext_output);
  p.AddReaderFlags(&reader_flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  uint64_t n = 0;
  if (p.app().count("--threads") && (!cli::ParseU64(threads, &n) || n > 1024)) return p.UsageError("--threads: bad value");
  if (p.app().count("--threads")) opt.threads = unsigned(n);
  opt.sync = !no_sync;
  if (ckpt.empty() || out.empty()) return p.UsageError("CKPT and -o IMAGE are required");
  if (int rc = p.FinishReaderFlags(reader_flags, &reader_options); rc >= 0) return rc;
  auto reader = CheckpointReader::Open(ckpt, reader_options);
  if (!reader) return cli::Fail(tool, reader.error());
  if ((*reader)->encrypted() && !plaintext_output) {
    return cli::UsageError(tool, ckpt + " is encrypted: " + out + " would hold the guest's memory in the clear (give "
                                 "--plaintext-output to write it anyway)", usage);
  }
  cli::Progress progress("restoring");
  opt.progress = [&](uint64_t d, uint64_t t) { progress.Update(d, t); };
  Status s = ExportRawImage(**reader, out, opt);
  progress.Finish();
  if (!s.ok()) return cli::Fail(tool, s);
  std::cout << "restored " << out << " (" << (*reader)->total_pages() * 4096 << " bytes)\n";
  if (std::string cached = BlockCacheSummary((*reader)->read_stats()); !cached.empty()) {
    std::cout << "  " << cached << "\n";
  }
  return 0;
}

}  // namespace halite::restore
