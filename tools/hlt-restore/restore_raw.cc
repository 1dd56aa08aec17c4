// hlt-restore raw CKPT -o IMAGE
#include <iostream>

#include "halite/checkpoint_reader.h"
#include "halite/raw_export.h"
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
  std::string ckpt, out, error, v;
  RawExportOptions opt;
  ReaderOptions reader_options;
  bool plaintext_output = false;
  while (!args.Done()) {
    if (args.Flag("-h") || args.Flag("--help")) {
      std::cout << usage;
      return 0;
    }
    if (args.Option("-o", &v, &error) || args.Option("--output", &v, &error)) {
      out = v;
    } else if (args.Option("--threads", &v, &error)) {
      uint64_t n;
      if (error.empty() && (!cli::ParseU64(v, &n) || n > 1024)) error = "--threads: bad value";
      opt.threads = unsigned(n);
    } else if (cli::ReaderOption(args, &reader_options, &error)) {
    } else if (args.Flag("--no-sync")) {
      opt.sync = false;
    } else if (args.Flag("--plaintext-output")) {
      plaintext_output = true;
    } else {
      args.Positional(&ckpt, &error);
    }
    if (!error.empty()) return cli::UsageError(tool, error, usage);
  }
  if (ckpt.empty() || out.empty()) return cli::UsageError(tool, "CKPT and -o IMAGE are required", usage);
  if (Status cache = cli::PrepareReaderOptions(args, &reader_options); !cache.ok()) return cli::Fail(tool, cache);
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
  if (std::string cached = cli::StorageSummary((*reader)->read_stats()); !cached.empty()) {
    std::cout << "  " << cached << "\n";
  }
  return 0;
}

}  // namespace halite::restore
