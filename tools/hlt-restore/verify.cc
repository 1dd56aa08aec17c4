// hlt-restore verify CKPT
#include <iostream>

#include "halite/checkpoint_info.h"
#include "halite/checkpoint_reader.h"
#include "common/cli_parser.h"
#include "hlt-restore/restore_modes.h"

namespace halite::restore {

int Verify(cli::Args& args) {
  const std::string tool = "hlt-restore verify";
  const std::string usage =
      std::string("usage: hlt-restore verify CKPT [--key-file K] [--parent-dir DIR] [--without-key]\n"
                  "Checks every rule of the format and every checksum, and decompresses every block and blob; for an\n"
                  "incremental checkpoint, of every file of its chain, and every page hash. An encrypted checkpoint\n"
                  "needs its key (every tag is checked), or --without-key: its structure and every payload's checksum\n"
                  "only (storage scrubbing without the tenant's key).\n") +
      cli::kReaderFlagsHelp;
  std::string ckpt;
  ReaderOptions reader_options;
  cli::Parser p(tool, usage);
  cli::ReaderFlagValues reader_flags;
  p.app().add_option("CKPT", ckpt);
  p.app().add_flag("--without-key", reader_options.open_without_key);
  p.AddReaderFlags(&reader_flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (ckpt.empty()) return p.UsageError("CKPT is required");
  if (int rc = p.FinishReaderFlags(reader_flags, &reader_options); rc >= 0) return rc;
  auto reader = CheckpointReader::Open(ckpt, reader_options);
  if (!reader) return cli::Fail(tool, reader.error());
  cli::Progress progress("verifying");
  Status s = (*reader)->VerifyAll([&](const VerifyProgress& p) { progress.Update(p.blocks_done, p.blocks_total); });
  progress.Finish();
  if (!s.ok()) return cli::Fail(tool, s);
  std::cout << VerifiedText(ckpt, **reader, bool(reader_options.mac_key));
  return 0;
}

}  // namespace halite::restore
