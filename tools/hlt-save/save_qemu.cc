// hlt-save qemu --qmp SOCKET -o CKPT [--live] [--then stop|quit|cont] [--no-va] [writer options]
// A running QEMU (through its QMP socket) as a checkpoint.
#include <cstdio>
#include <iostream>

#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_option_names.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/qemu/qemu_parent_image.h"
#include "halite/qemu/qemu_save_report.h"
#include "hlt-save/save_modes.h"
#include "hlt-save/va_report.h"
#include "hlt-save/writer_flags.h"

namespace halite::save {

namespace {
const char* kQemuUsage =
    "usage: hlt-save qemu --qmp SOCKET -o CKPT [--live] [--then stop|quit|cont] [--no-va] [writer options]\n"
    "Saves the VM of a running QEMU (stock, any version speaking migration stream v3; tested with 7.2) through\n"
    "its QMP socket: QEMU migrates into hlt-save over a socketpair; each RAMBlock becomes a region, the device\n"
    "state and the rest of the stream become blob \"qemu.state\"; the guest's page tables (vCPU CR3 from\n"
    "`info registers -a`, other address spaces found in memory) give virtual-address hints.\n"
    "  --qmp SOCKET           QEMU's QMP unix socket (-qmp unix:SOCKET,server=on,wait=off)\n"
    "  --live                 background snapshot: the guest keeps running; the pages it writes during the\n"
    "                         save become the checkpoint's access trace (working set)\n"
    "  --then stop|quit|cont  afterwards: leave the guest stopped, quit QEMU (once the checkpoint is written),\n"
    "                         or continue a guest that was running (default; it continues as soon as the\n"
    "                         stream is complete, before compression)\n"
    "  --no-va                skip the page-table walk\n";
}  // namespace

int SaveQemu(cli::Args& args) {
  const std::string tool = "hlt-save qemu";
  std::string usage = std::string(kQemuUsage) + kAccessWindowHelp + kWriterFlagsHelp;
  std::string socket, out, then;
  WriterFlags flags;
  flags.options.metadata.creator = "libhalite hlt-save qemu";
  qemu::CheckpointSaveOptions opt;
  bool no_va = false;
  cli::Parser p(tool, usage);
  WriterFlagText text;
  AccessWindowText window;
  p.app().add_option("-o,--output", out);
  p.app().add_option("--qmp", socket);
  p.app().add_flag("--live", opt.live);
  p.app().add_option("--then", then);
  p.app().add_flag("--no-va", no_va);
  AddAccessWindowFlags(p.app(), &window);
  AddWriterFlags(p.app(), &text, &flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (p.app().count("--then")) {
    auto chosen = qemu::ParseSaveThen(then);
    if (!chosen) return p.UsageError("--then: " + chosen.error().message());
    opt.then = *chosen;
  }
  if (no_va) opt.va_walk = false;
  if (std::string bad = ApplyAccessWindowFlags(p.app(), window, &opt.access_window); !bad.empty()) {
    return p.UsageError(bad);
  }
  if (std::string bad = ApplyWriterFlags(p.app(), text, &flags); !bad.empty()) return p.UsageError(bad);
  if (socket.empty() || out.empty()) return p.UsageError("--qmp SOCKET and -o CKPT are required");

  auto qmp = qemu::QmpClient::Connect(socket, 5000);
  if (!qmp) return cli::Fail(tool, qmp.error());
  cli::Progress progress("saving");
  if (Status prepared = PrepareWriter(&flags, out); !prepared.ok()) return cli::Fail(tool, prepared);  // keys, --parent
  flags.options.progress = [&](const WriteProgress& p) { progress.Update(p.raw_bytes_done, p.raw_bytes_total); };
  opt.writer = flags.options;
  opt.before_finish = [&](CheckpointWriter& w) { return flags.ApplyHints(w); };
  // A clone restored from the parent with --memory shared: its unwritten pages are the parent's, unread.
  if (flags.options.parent) opt.is_parent_image = qemu::ParentImageCheck(flags.options.parent);
  auto r = qemu::SaveQemuToCheckpoint(**qmp, out, std::move(opt));
  progress.Finish();
  if (!r) return cli::Fail(tool, r.error());

  std::fputs(qemu::QemuSaveReportText(*r, out).c_str(), stdout);
  return cli::kExitOk;
}

}  // namespace halite::save
