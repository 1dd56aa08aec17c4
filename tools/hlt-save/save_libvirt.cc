// hlt-save libvirt DOMAIN -o CKPT [--connect URI] [--live] [--then cont|stop|destroy] [--no-va] [writer options]
// A running libvirt domain, its memory and its disks frozen at one instant, as a checkpoint.
#include <cstdio>
#include <iostream>

#include "halite/libvirt/libvirt_checkpoint.h"
#include "halite/libvirt/libvirt_save_report.h"
#include "halite/qemu/qemu_parent_image.h"
#include "hlt-save/save_modes.h"
#include "hlt-save/va_report.h"
#include "hlt-save/writer_flags.h"

namespace halite::save {

namespace {
const char* kLibvirtUsage =
    "usage: hlt-save libvirt DOMAIN -o CKPT [--connect URI] [--live] [--then cont|stop|destroy] [--no-va]\n"
    "                        [writer options]\n"
    "Saves a running libvirt domain (QEMU driver). hlt-save reaches its QEMU through libvirt's monitor\n"
    "passthrough (the domain's only QMP monitor is libvirt's; libvirt notes the domain as tainted\n"
    "\"custom-monitor\"). With the guest paused, every writable file-backed disk is frozen by an external\n"
    "disk-only snapshot and the memory is saved: the image as it is becomes the base of every restore and the\n"
    "domain goes on on a new qcow2 overlay beside it (IMAGE.hlt-TIME.qcow2). The checkpoint records the\n"
    "domain's XML and each frozen image's path, format, size and XXH3-128; a restore refuses a changed image.\n"
    "The UEFI variable store (<nvram>) and an emulated TPM's state (swtpm's directory) are read at the same\n"
    "instant and kept in the checkpoint: every restore gets a copy of its own. A failed save leaves the domain\n"
    "on its images (an overlay it went on to is committed back into its image and removed).\n"
    "  --connect URI          libvirt URI (default: libvirt's default; e.g. qemu:///system,\n"
    "                         qemu:///embed?root=DIR)\n"
    "  --live                 background snapshot: the guest keeps running; it is paused only while the disks\n"
    "                         and state files are taken and QEMU captures its devices and memory (tens of ms)\n"
    "  --then cont|stop|destroy  afterwards: resume the guest if it was running (default), leave it paused,\n"
    "                         or destroy it\n"
    "  --no-va                skip the page-table walk\n";
}  // namespace

int SaveLibvirt(cli::Args& args) {
  const std::string tool = "hlt-save libvirt";
  std::string usage = std::string(kLibvirtUsage) + kAccessWindowHelp + kWriterFlagsHelp;
  std::string domain, uri, out, then;
  WriterFlags flags;
  flags.options.metadata.creator = "libhalite hlt-save libvirt";
  libvirt::LibvirtSaveOptions opt;
  bool no_va = false;
  cli::Parser p(tool, usage);
  WriterFlagText text;
  AccessWindowText window;
  p.app().add_option("DOMAIN", domain);
  p.app().add_option("-o,--output", out);
  p.app().add_option("--connect,-c", uri);
  p.app().add_flag("--live", opt.qemu.live);
  p.app().add_option("--then", then);
  p.app().add_flag("--no-va", no_va);
  AddAccessWindowFlags(p.app(), &window);
  AddWriterFlags(p.app(), &text, &flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (p.app().count("--then")) {
    auto chosen = libvirt::ParseLibvirtSaveThen(then);
    if (!chosen) return p.UsageError("--then: " + chosen.error().message());
    opt.then = *chosen;
  }
  if (no_va) opt.qemu.va_walk = false;
  if (std::string bad = ApplyAccessWindowFlags(p.app(), window, &opt.qemu.access_window); !bad.empty()) {
    return p.UsageError(bad);
  }
  if (std::string bad = ApplyWriterFlags(p.app(), text, &flags); !bad.empty()) return p.UsageError(bad);
  if (domain.empty() || out.empty()) return p.UsageError("DOMAIN and -o CKPT are required");

  auto conn = libvirt::Connection::Open(uri);
  if (!conn) return cli::Fail(tool, conn.error());
  cli::Progress progress("saving");
  if (Status prepared = PrepareWriter(&flags, out); !prepared.ok()) return cli::Fail(tool, prepared);  // keys, --parent
  flags.options.progress = [&](const WriteProgress& p) { progress.Update(p.raw_bytes_done, p.raw_bytes_total); };
  opt.qemu.writer = flags.options;
  opt.qemu.before_finish = [&](CheckpointWriter& w) { return flags.ApplyHints(w); };
  // A clone restored from the parent with --memory shared: its unwritten pages are the parent's, unread.
  if (flags.options.parent) opt.qemu.is_parent_image = qemu::ParentImageCheck(flags.options.parent);
  auto r = libvirt::SaveLibvirtDomain(**conn, domain, out, std::move(opt));
  progress.Finish();
  if (!r) return cli::Fail(tool, r.error());

  std::fputs(libvirt::LibvirtSaveReportText(*r, (*conn)->uri(), out).c_str(), stdout);
  return cli::kExitOk;
}

}  // namespace halite::save
