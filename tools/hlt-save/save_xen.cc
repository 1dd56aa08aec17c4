// hlt-save xen STREAM -o CKPT [--format F] [--no-va] [writer options]
// An `xl save` image (or a bare libxl / libxc stream) from a file, a FIFO or standard input, as a checkpoint.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>

#include "halite/xen/xen_checkpoint.h"
#include "halite/xen/xen_report.h"
#include "hlt-save/save_modes.h"
#include "hlt-save/writer_flags.h"

namespace halite::save {

namespace {
const char* kXenUsage =
    "usage: hlt-save xen STREAM -o CKPT [--format xl|libxl|libxc] [--no-va] [writer options]\n"
    "Saves a Xen x86 HVM save stream (what `xl save` writes; a file, a FIFO, or - for standard input) as a\n"
    "checkpoint: pages in region \"xen.physmap\" (XTAB holes absent, XALLOC pages zero, the last copy of a resent\n"
    "page wins), every other record in blob \"xen.state\", and virtual-address hints from the guest's page tables\n"
    "(vCPU CR3s from the HVM context, plus other address spaces sharing the kernel half).\n"
    "  --format F             xl, libxl or libxc (default: detected from the first bytes)\n"
    "  --no-va                skip the page-table walk\n";
}  // namespace

int SaveXen(cli::Args& args) {
  const std::string tool = "hlt-save xen";
  std::string usage = std::string(kXenUsage) + kWriterFlagsHelp;
  std::string stream, out, format;
  WriterFlags flags;
  flags.options.metadata.creator = "libhalite hlt-save xen";
  xen::SaveOptions opt;
  bool no_va = false;
  cli::Parser p(tool, usage);
  WriterFlagText text;
  p.app().add_option("STREAM", stream);
  p.app().add_option("-o,--output", out);
  p.app().add_option("--format", format);
  p.app().add_flag("--no-va", no_va);
  AddWriterFlags(p.app(), &text, &flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (p.app().count("--format")) {
    opt.detect_format = false;
    auto chosen = xen::ParseStreamFormat(format);
    if (!chosen) return p.UsageError("--format: " + chosen.error().message());
    opt.read.format = *chosen;
  }
  if (no_va) opt.va_walk = false;
  if (std::string bad = ApplyWriterFlags(p.app(), text, &flags); !bad.empty()) return p.UsageError(bad);
  if (stream.empty() || out.empty()) return p.UsageError("STREAM and -o CKPT are required");

  int fd = stream == "-" ? STDIN_FILENO : ::open(stream.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cli::Fail(tool, Status::IoError(stream + ": cannot open", errno));
  opt.read.source_name = stream == "-" ? "stdin" : stream;
  cli::Progress progress("saving");
  if (Status prepared = PrepareWriter(&flags, out); !prepared.ok()) return cli::Fail(tool, prepared);  // keys, --parent
  flags.options.progress = [&](const WriteProgress& p) { progress.Update(p.raw_bytes_done, p.raw_bytes_total); };
  opt.writer = flags.options;
  opt.before_finish = [&](CheckpointWriter& w) { return flags.ApplyHints(w); };
  const bool va_walk = opt.va_walk;
  auto r = xen::SaveStreamToCheckpoint(fd, out, std::move(opt));
  progress.Finish();
  if (fd != STDIN_FILENO) ::close(fd);
  if (!r) return cli::Fail(tool, r.error());

  std::fputs(xen::XenSaveReportText(*r, out, va_walk).c_str(), stdout);
  return cli::kExitOk;
}

}  // namespace halite::save
