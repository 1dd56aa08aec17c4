// hlt-save xen STREAM -o CKPT [--format F] [--no-va] [writer options]
// An `xl save` image (or a bare libxl / libxc stream) from a file, a FIFO or standard input, as a checkpoint.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>

#include "halite/xen/xen_checkpoint.h"
#include "hlt-save/save_modes.h"
#include "hlt-save/va_report.h"
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
    if (format == "xl") {
      opt.read.format = xen::StreamFormat::kXl;
    } else if (format == "libxl") {
      opt.read.format = xen::StreamFormat::kLibxl;
    } else if (format == "libxc") {
      opt.read.format = xen::StreamFormat::kLibxc;
    } else {
      return p.UsageError("--format: expected xl, libxl or libxc, got \"" + format + "\"");
    }
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

  PrintSummary(r->summary, out);
  const auto& im = r->import;
  std::printf("  xen stream       %s, %llu batches, %llu data pages, %llu XTAB, %llu XALLOC, %llu resent; "
              "%.3f s to import\n",
              xen::StreamFormatName(r->format), (unsigned long long)im.batches, (unsigned long long)im.data_pages,
              (unsigned long long)im.xtab_entries, (unsigned long long)im.xalloc_entries,
              (unsigned long long)im.resent_entries, r->import_seconds);
  std::printf("  xen physmap      %llu pages: %llu with data, %llu zero, %llu holes; state blob %zu bytes\n",
              (unsigned long long)r->region_pages, (unsigned long long)r->data_pages,
              (unsigned long long)r->zero_pages, (unsigned long long)r->hole_pages, r->state_blob_bytes);
  const auto& va = r->va;
  if (!va_walk) {
    std::printf("  va walk          off (--no-va)\n");
  } else {
    std::fputs(x86::PageTableHintReportText(va).c_str(), stdout);
  }
  return cli::kExitOk;
}

}  // namespace halite::save
