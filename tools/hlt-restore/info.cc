// hlt-restore info CKPT [--json]: the counts, the text and the JSON document are the library's
// (halite/checkpoint_info.h), shared with the C API.
#include <iostream>

#include "halite/checkpoint_info.h"
#include "halite/checkpoint_reader.h"
#include "common/cli_parser.h"
#include "hlt-restore/restore_modes.h"

namespace halite::restore {

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
  std::cout << (json ? CheckpointInfoJson(**reader, c) : CheckpointInfoText(**reader, c));
  return 0;
}

}  // namespace halite::restore
