// xen-stream-tool: a test helper around the codec (not installed; `hlt-save xen` / `hlt-restore xen` are the
// user-facing commands once the checkpoint glue lands).
//
//   xen-stream-tool dump [--format F] FILE|-          print the reader's events (test-vectors/README.md format)
//   xen-stream-tool roundtrip [--format F] IN OUT     import (pages to an in-memory store), encode and decode the
//                                                     state blob, export to OUT
//   xen-stream-tool synth --pages N [--guest linux] OUT
//                                                     write a synthetic HVM image of N pages with the exporter;
//                                                     --guest linux lays a Linux-like guest's page tables and
//                                                     long-mode vCPUs over it (xen_synth_guest.h)
//   xen-stream-tool check-synth IN OUT                import IN checking every page against the synthetic
//                                                     content, then export it to OUT pulling pages from the
//                                                     generator (pages never sit in memory)
//   xen-stream-tool skeleton CKPT OUT                 the lazy pager's skeleton stream of a checkpoint
//                                                     (pager/xen_pager_core.h)
// FILE "-" is standard input, OUT "-" standard output. Exit 0 on success, 1 on a codec error (printed), 2 on
// usage errors.
#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "halite/xen/xen_save_image.h"
#include "halite/xen/xen_stream_reader.h"
#include "halite/checkpoint_reader.h"
#include "xen_pager_core.h"
#include "xen_synth_guest.h"
#include "xen_test_dump.h"

using namespace halite;
using namespace halite::xen;

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: xen-stream-tool dump [--format xl|libxl|libxc] FILE\n"
               "       xen-stream-tool roundtrip [--format F] IN OUT\n"
               "       xen-stream-tool synth --pages N [--guest linux] OUT\n"
               "       xen-stream-tool check-synth IN OUT\n"
               "       xen-stream-tool skeleton CKPT OUT\n");
  return 2;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "xen-stream-tool: %s\n", s.ToString().c_str());
  return 1;
}

int OpenIn(const std::string& path) { return path == "-" ? 0 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }
int OpenOut(const std::string& path) {
  return path == "-" ? 1 : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// Checks each imported page against the synthetic generator instead of storing it.
class SynthChecker : public PageBatchSink {
 public:
  Status OnPages(const PageBatch& batch) override {
    std::vector<uint8_t> want(kPageSize);
    for (const PageEntry& e : batch.entries) {
      if (e.type != testing::SynthType(e.pfn)) return Status::Corrupt("pfn " + std::to_string(e.pfn) + ": type");
      if (!e.data) continue;
      testing::SynthPage(e.pfn, want.data());
      if (std::memcmp(want.data(), e.data, kPageSize) != 0) {
        return Status::Corrupt("pfn " + std::to_string(e.pfn) + ": content differs from the synthetic page");
      }
      ++checked;
    }
    return Status::Ok();
  }
  uint64_t checked = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage();
  std::string cmd = args[0];
  args.erase(args.begin());
  ReadOptions options;
  uint64_t pages = 0;
  bool linux_guest = false;
  std::vector<std::string> files;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--format" && i + 1 < args.size()) {
      std::string f = args[++i];
      if (f == "xl") options.format = StreamFormat::kXl;
      else if (f == "libxl") options.format = StreamFormat::kLibxl;
      else if (f == "libxc") options.format = StreamFormat::kLibxc;
      else return Usage();
    } else if (args[i] == "--guest" && i + 1 < args.size()) {
      if (args[++i] != "linux") return Usage();
      linux_guest = true;
    } else if (args[i] == "--pages" && i + 1 < args.size()) {
      pages = std::stoull(args[++i]);
    } else {
      files.push_back(args[i]);
    }
  }

  if (cmd == "synth") {
    if (files.size() != 1 || pages == 0) return Usage();
    int fd = OpenOut(files[0]);
    if (fd < 0) return Fail(Status::IoError("cannot create " + files[0], errno));
    FdSink sink(fd);
    Status s;
    if (linux_guest) {
      if (pages < 16384) return Usage();
      testing::SynthLinuxGuest guest(pages);
      testing::SynthGuestPageSource source(guest);
      s = ExportSaveStream(testing::MakeSynthGuestImage(pages, guest.vcpus()), source, sink);
      std::fprintf(stderr, "synthetic Linux-like guest: %s\n", guest.Describe().c_str());
    } else {
      testing::SynthPageSource source;
      s = ExportSaveStream(testing::MakeSynthImage(pages), source, sink);
    }
    if (fd != 1) ::close(fd);
    return s.ok() ? 0 : Fail(s);
  }

  if (cmd == "skeleton") {
    if (files.size() != 2) return Usage();
    auto reader = CheckpointReader::Open(files[0]);
    if (!reader) return Fail(reader.error());
    int fd = OpenOut(files[1]);
    if (fd < 0) return Fail(Status::IoError("cannot create " + files[1], errno));
    FdSink sink(fd);
    Status s = pager::ExportSkeleton(**reader, sink);
    if (s.ok()) s = sink.Flush();
    if (fd != 1) ::close(fd);
    return s.ok() ? 0 : Fail(s);
  }

  if (files.empty()) return Usage();
  options.source_name = files[0];
  int in = OpenIn(files[0]);
  if (in < 0) return Fail(Status::IoError("cannot open " + files[0], errno));
  FdSource source(in, FdSourceOptions{files[0], 256 * 1024});

  if (cmd == "dump" && files.size() == 1) {
    testing::DumpVisitor dump;
    Status s = ReadStream(source, dump, options);
    std::fputs(dump.text().c_str(), stdout);
    return s.ok() ? 0 : Fail(s);
  }
  if ((cmd == "roundtrip" || cmd == "check-synth") && files.size() == 2) {
    testing::MemoryPageStore store;
    SynthChecker checker;
    testing::SynthPageSource synth;
    PageBatchSink& sink = cmd == "roundtrip" ? static_cast<PageBatchSink&>(store) : checker;
    PageBatchSource& pages_in = cmd == "roundtrip" ? static_cast<PageBatchSource&>(store) : synth;
    ImportStats stats;
    auto image = ImportSaveStream(source, sink, options, &stats);
    if (!image) return Fail(image.error());
    // Through the device-state blob, as the checkpoint glue will store it.
    std::vector<uint8_t> blob = EncodeXenState(*image);
    auto decoded = DecodeXenState(blob);
    if (!decoded) return Fail(decoded.error());
    if (!(*decoded == *image)) return Fail(Status::Internal("state blob did not round-trip"));
    int out = OpenOut(files[1]);
    if (out < 0) return Fail(Status::IoError("cannot create " + files[1], errno));
    FdSink sink_out(out);
    Status s = ExportSaveStream(*decoded, pages_in, sink_out);
    if (out != 1) ::close(out);
    if (!s.ok()) return Fail(s);
    std::fprintf(stderr,
                 "%s: %" PRIu64 " batches, %" PRIu64 " data pages, %" PRIu64 " XTAB, %" PRIu64 " XALLOC, %" PRIu64
                 " resent, %zu-byte state blob%s\n",
                 files[0].c_str(), stats.batches, stats.data_pages, stats.xtab_entries, stats.xalloc_entries,
                 stats.resent_entries, blob.size(),
                 cmd == "check-synth" ? (", " + std::to_string(checker.checked) + " pages checked").c_str() : "");
    return 0;
  }
  return Usage();
}
