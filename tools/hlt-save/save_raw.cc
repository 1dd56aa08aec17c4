// hlt-save raw IMAGE -o CKPT [writer options]: a raw memory image as one region called "ram".
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <iostream>

#include "hlt-save/save_modes.h"
#include "hlt-save/writer_flags.h"

namespace halite::save {

const char* kRawUsage =
    "usage: hlt-save raw IMAGE -o CKPT [writer options]\n"
    "Saves a raw memory image (a multiple of 4096 bytes) as a checkpoint with one region, \"ram\".\n";

int SaveRaw(cli::Args& args) {
  const std::string tool = "hlt-save raw";
  std::string usage = std::string(kRawUsage) + kWriterFlagsHelp;
  std::string image, out;
  WriterFlags flags;
  flags.options.metadata.vmm_kind = VmmKind::kRaw;
  flags.options.metadata.creator = "libhalite hlt-save raw";
  cli::Parser p(tool, usage);
  WriterFlagText text;
  p.app().add_option("IMAGE", image);
  p.app().add_option("-o,--output", out);
  AddWriterFlags(p.app(), &text, &flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (std::string bad = ApplyWriterFlags(p.app(), text, &flags); !bad.empty()) return p.UsageError(bad);
  if (image.empty() || out.empty()) return p.UsageError("IMAGE and -o CKPT are required");

  struct stat st;
  if (::stat(image.c_str(), &st) != 0) return cli::Fail(tool, Status::IoError(image + ": cannot stat", errno));
  if (st.st_size == 0 || st.st_size % 4096 != 0) {
    return cli::Fail(tool, Status::InvalidArgument(image + ": size " + std::to_string(st.st_size) +
                                                   " is not a non-zero multiple of 4096"));
  }
  cli::Progress progress("saving");
  if (Status prepared = PrepareWriter(&flags, out); !prepared.ok()) return cli::Fail(tool, prepared);  // keys, --parent
  flags.options.progress = [&](const WriteProgress& p) { progress.Update(p.raw_bytes_done, p.raw_bytes_total); };
  auto writer = CheckpointWriter::Create(out, flags.options);
  if (!writer) return cli::Fail(tool, writer.error());
  auto region = (*writer)->AddRegion("ram", 0, uint64_t(st.st_size));
  if (!region) return cli::Fail(tool, region.error());
  Status s = (*writer)->AttachImage(*region, image);
  if (s.ok()) s = flags.ApplyHints(**writer);
  if (!s.ok()) return cli::Fail(tool, s);
  auto summary = (*writer)->Finish();
  progress.Finish();
  if (!summary) return cli::Fail(tool, summary.error());
  std::fputs(WriteSummaryText(*summary, out).c_str(), stdout);
  return cli::kExitOk;
}

}  // namespace halite::save
