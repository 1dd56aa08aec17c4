// hlt-xen-pager: lazy restore of a Xen HVM guest from a libhalite checkpoint, xenpaging-style.
//
//   hlt-xen-pager probe
//   hlt-xen-pager skeleton CKPT -o STREAM [--key-file K] [--encrypt-key-file K] [--keyring FILE]
//   hlt-xen-pager serve --domain D CKPT [--key-file K] [--encrypt-key-file K] [--keyring FILE] [--no-unpause]
//
// EXPERIMENTAL AND UNTESTED ON XEN: it needs a hypervisor built with CONFIG_MEM_PAGING (which needs
// CONFIG_UNSUPPORTED since Xen 4.16; Debian's is built without it), HAP (EPT/NPT), no IOMMU passthrough, no PoD.
// It has compiled, linked and run its probe here; it has never paged a real guest. See README.md.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "halite/authentication.h"
#include "halite/checkpoint_reader.h"
#include "halite/storage.h"
#include "halite/xen/xen_checkpoint.h"
#include "xen_pager_core.h"
#include "xen_pager_hv.h"

using namespace halite;
using namespace halite::xen;
using namespace halite::xen::pager;

namespace {

constexpr int kExitUsage = 2, kExitIo = 3, kExitCorrupt = 4, kExitNoHypervisor = 77;

const char* kUsage =
    "usage: hlt-xen-pager probe\n"
    "       hlt-xen-pager skeleton CKPT -o STREAM [--key-file K] [--encrypt-key-file K] [--keyring FILE]\n"
    "       hlt-xen-pager serve --domain D CKPT [--key-file K] [--encrypt-key-file K] [--keyring FILE] [--no-unpause]\n"
    "  (an encrypted checkpoint's key: --encrypt-key-file, --keyring, HALITE_ENCRYPT_KEY, HALITE_KEYRING)\n"
    "Lazy restore of a Xen HVM guest from a checkpoint made by `hlt-save xen`:\n"
    "  1. hlt-xen-pager skeleton CKPT -o skel.xl    the stream with every page left to the pager\n"
    "  2. xl restore -p skel.xl                      creates the domain, paused, memory allocated but empty\n"
    "  3. hlt-xen-pager serve --domain D CKPT         pages everything out, unpauses, loads blocks on demand\n"
    "EXPERIMENTAL, never run on a real Xen: needs a hypervisor built with CONFIG_MEM_PAGING (Debian's is not).\n"
    "probe exits 0 when a hypervisor answers and 77 when there is none.\n";

int Fail(const Status& s) {
  std::fprintf(stderr, "hlt-xen-pager: %s\n", s.ToString().c_str());
  switch (s.code()) {
    case StatusCode::kIoError: return kExitIo;
    case StatusCode::kCorrupt:
    case StatusCode::kUnsupported:
    case StatusCode::kAuthFailed: return kExitCorrupt;
    default: return kExitUsage;
  }
}

Status Errno(const std::string& what, uint64_t gfn, int neg_errno) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "gfn 0x%llx", static_cast<unsigned long long>(gfn));
  return Status::IoError(what + " of " + buf + " failed", -neg_errno);
}

class XenOps final : public PagingOps {
 public:
  explicit XenOps(hlt_xen_paging* p) : p_(p) {}
  Result<bool> Evict(uint64_t gfn) override {
    int rc = hlt_xen_paging_evict(p_, gfn);
    if (rc < 0) return Errno("nominate/evict", gfn, rc);
    return rc == 0;
  }
  Status Load(uint64_t gfn, const uint8_t* page) override {
    int rc = hlt_xen_paging_load(p_, gfn, page);
    return rc == 0 ? Status::Ok() : Errno("paging load", gfn, rc);
  }
  Status Write(uint64_t gfn, const uint8_t* page) override {
    int rc = hlt_xen_paging_write(p_, gfn, page);
    return rc == 0 ? Status::Ok() : Errno("foreign write", gfn, rc);
  }
  Status Respond(const PagingRequest& r) override {
    hlt_xen_paging_req req{r.gfn, r.vcpu_id, r.flags, 0};
    if (r.drop) req.paging_flags |= HLT_MEM_PAGING_DROP_PAGE;
    if (r.evict_fail) req.paging_flags |= HLT_MEM_PAGING_EVICT_FAIL;
    int rc = hlt_xen_paging_respond(p_, &req);
    return rc == 0 ? Status::Ok() : Errno("response", r.gfn, rc);
  }

 private:
  hlt_xen_paging* p_;
};

PagingRequest ToRequest(const hlt_xen_paging_req& r) {
  return PagingRequest{r.gfn, r.vcpu_id, r.flags, (r.paging_flags & HLT_MEM_PAGING_DROP_PAGE) != 0,
                       (r.paging_flags & HLT_MEM_PAGING_EVICT_FAIL) != 0};
}

struct Args {
  std::vector<std::string> positional;
  std::string out, key_file;
  std::vector<std::string> encrypt_key_files, keyrings;  // format-spec 13
  long domain = -1;
  bool unpause = true;
  std::string error;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        a.error = s + " needs a value";
        return "";
      }
      return argv[++i];
    };
    if (s == "-o") {
      a.out = value();
    } else if (s == "--key-file") {
      a.key_file = value();
    } else if (s == "--encrypt-key-file") {
      a.encrypt_key_files.push_back(value());
    } else if (s == "--keyring") {
      a.keyrings.push_back(value());
    } else if (s == "--domain") {
      std::string v = value();
      char* end = nullptr;
      a.domain = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || a.domain < 0 || a.domain >= 0x7FF0) a.error = "--domain: bad domain id \"" + v + "\"";
    } else if (s == "--no-unpause") {
      a.unpause = false;
    } else if (!s.empty() && s[0] == '-' && s != "-") {
      a.error = "unknown option " + s;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

Result<std::unique_ptr<CheckpointReader>> OpenCheckpoint(const Args& a) {
  ReaderOptions ro;
  if (!a.key_file.empty()) {
    HLT_ASSIGN_OR_RETURN(ro.mac_key, ReadMacKeyFile(a.key_file));
  }
  HLT_ASSIGN_OR_RETURN(ro.keyring, Keyring::FromEnvironment());
  if (!ro.keyring && (!a.encrypt_key_files.empty() || !a.keyrings.empty())) ro.keyring = std::make_shared<Keyring>();
  for (const std::string& f : a.encrypt_key_files) {
    HLT_ASSIGN_OR_RETURN(EncryptionKey key, ReadKeyFile(f));
    HLT_RETURN_IF_ERROR(ro.keyring->Add(key));
  }
  for (const std::string& f : a.keyrings) HLT_RETURN_IF_ERROR(ro.keyring->AddFile(f));
  return CheckpointReader::Open(a.positional[0], ro);
}

int Probe() {
  char msg[512];
  int rc = hlt_xen_probe(msg, sizeof msg);
  if (rc != 0) {
    std::fprintf(stderr,
                 "=====================================================================\n"
                 "SKIPPED: %s\n"
                 "  (the lazy pager needs a Xen dom0 whose hypervisor has CONFIG_MEM_PAGING)\n"
                 "=====================================================================\n",
                 msg);
    return kExitNoHypervisor;
  }
  std::printf("hlt-xen-pager: %s\n", msg);
  return 0;
}

int Skeleton(const Args& a) {
  if (a.positional.size() != 1 || a.out.empty()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  auto reader = OpenCheckpoint(a);
  if (!reader) return Fail(reader.error());
  struct stat st;
  const bool stream = a.out == "-" || (::stat(a.out.c_str(), &st) == 0 && !S_ISREG(st.st_mode));
  if (stream) {
    int fd = a.out == "-" ? STDOUT_FILENO : ::open(a.out.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Fail(Status::IoError(a.out + ": cannot open", errno));
    FdSink sink(fd, FdSinkOptions{a.out == "-" ? "stdout" : a.out});
    Status s = ExportSkeleton(**reader, sink);
    if (s.ok()) s = sink.Flush();
    if (fd != STDOUT_FILENO) ::close(fd);
    return s.ok() ? 0 : Fail(s);
  }
  auto file = CreateAtomicFileSink(a.out);
  if (!file) return Fail(file.error());
  AppendSinkByteSink sink(std::move(*file));
  Status s = ExportSkeleton(**reader, sink);
  if (s.ok()) s = sink.Commit();
  return s.ok() ? 0 : Fail(s);
}

int Serve(const Args& a) {
  if (a.positional.size() != 1 || a.domain < 0) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  auto reader = OpenCheckpoint(a);
  if (!reader) return Fail(reader.error());
  char msg[512];
  if (hlt_xen_probe(msg, sizeof msg) != 0) {
    std::fprintf(stderr, "hlt-xen-pager: %s\n", msg);
    return kExitNoHypervisor;
  }
  char err[512] = "";
  hlt_xen_paging* p = hlt_xen_paging_attach(uint32_t(a.domain), err, sizeof err);
  if (!p) {
    std::fprintf(stderr, "hlt-xen-pager: domain %ld: %s\n", a.domain, err);
    return kExitIo;
  }
  XenOps ops(p);
  auto core = PagerCore::Create(**reader, ops);
  if (!core) {
    hlt_xen_paging_detach(p, 1);
    return Fail(core.error());
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  Status s = (*core)->EvictAll();
  const PagerStats& st = (*core)->stats();
  std::fprintf(stderr, "hlt-xen-pager: domain %ld: %llu pages paged out, %llu written now (in use), %.3f s\n",
               a.domain, (unsigned long long)st.evicted, (unsigned long long)st.written_unevictable, elapsed());
  if (s.ok() && a.unpause && hlt_xen_paging_unpause(p) != 0) s = Status::IoError("unpausing the domain failed", errno);
  double running = elapsed();
  std::vector<hlt_xen_paging_req> reqs(64);
  while (s.ok() && !(*core)->done()) {
    // Requests first; the loader fills the gaps (no waiting while it has blocks to load).
    int n = hlt_xen_paging_wait(p, 0, reqs.data(), int(reqs.size()));
    if (n < 0) {
      s = Status::IoError("waiting for paging requests failed", -n);
      break;
    }
    for (int i = 0; i < n && s.ok(); ++i) {
      s = (*core)->OnRequest(ToRequest(reqs[i]));
    }
    if (!s.ok() || n > 0) continue;
    auto more = (*core)->LoadNextBlock();
    if (!more) s = more.error();
  }
  // Answer what is left on the ring so no vCPU stays paused, then detach (disables paging when all is in).
  if (s.ok()) {
    int n;
    while ((n = hlt_xen_paging_wait(p, 0, reqs.data(), int(reqs.size()))) > 0) {
      for (int i = 0; i < n && s.ok(); ++i) {
        s = (*core)->OnRequest(ToRequest(reqs[i]));
      }
    }
  }
  hlt_xen_paging_detach(p, (*core)->done() ? 1 : 0);
  std::fprintf(stderr,
               "hlt-xen-pager: domain %ld: %llu requests (%llu blocks, %llu pages on demand), %llu blocks / %llu "
               "pages loaded in the background, %llu dropped; %.3f s after the guest started\n",
               a.domain, (unsigned long long)st.requests, (unsigned long long)st.fault_blocks,
               (unsigned long long)st.fault_pages, (unsigned long long)st.background_blocks,
               (unsigned long long)st.background_pages, (unsigned long long)st.dropped, elapsed() - running);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : 0;
  }
  Args a = Parse(argc, argv);
  if (!a.error.empty()) {
    std::fprintf(stderr, "hlt-xen-pager: %s\n%s", a.error.c_str(), kUsage);
    return kExitUsage;
  }
  std::string cmd = argv[1];
  if (cmd == "probe") return Probe();
  if (cmd == "skeleton") return Skeleton(a);
  if (cmd == "serve") return Serve(a);
  std::fprintf(stderr, "hlt-xen-pager: unknown command \"%s\"\n%s", cmd.c_str(), kUsage);
  return kExitUsage;
}
