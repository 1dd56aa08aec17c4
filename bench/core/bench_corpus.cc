// bench_corpus: checkpoint size and block-fault cost on a corpus of memory images, for each coding setting and for
// the writer's defaults. Baseline, in the same run: `zstd -3` of the whole image (one frame at level 3, as
// `zstd -3 --no-check` writes it), which sees every repeat within zstd's 2 MiB window but cannot be read lazily.
//
//   bench_corpus IMAGE[=NAME]... [--child PARENT_IMAGE:CHILD_IMAGE[=NAME]]... [--settings S,S,...]
//                [--faults N] [--work DIR] [--csv FILE] [--json FILE]
//
// Any raw memory image works (a file of 4 KiB pages: make_corpus_image's, a guest's memory exported with
// `hlt-restore raw`, a desktop's). Settings: `defaults` (WriterOptions{}), `fN` (frames of N pages, 0: one frame a
// block) with `+dict` (dictionary on) or `+nodict`; `+plain` (children: changed pages coded on their own, not
// against the parent). A child (--child) is saved with --parent against the parent's checkpoint saved with the same
// setting, and compared with `zstd -3` of its changed pages alone; the chain is then read whole, every page
// checked, counting block payloads read against the blocks of the chain's files that the view reads.
//
// Block fault: a random stored page (each page equally likely); the time from asking for its block until the page's
// bytes are decoded (what a streamed fault waits for: wall time, and the reading thread's CPU time, which a loaded
// machine does not inflate), and until the whole block (group) is; warm (file in the page cache).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codec/zstd_codec.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "support/temp_dir.h"

using namespace halite;
using Clock = std::chrono::steady_clock;

namespace {

struct Setting {
  std::string name;
  bool defaults = false;
  uint32_t frame_pages = 16;
  DictionaryMode dictionary = DictionaryMode::kOff;
  bool plain = false;  // children: no coding against the parent
};

struct Percentiles {
  double p50 = 0, p99 = 0;
};

struct Measure {
  std::string image, setting;
  uint64_t raw = 0, zstd = 0, file = 0, blocks = 0;
  double save_s = 0;
  Percentiles to_page, to_page_cpu, whole;  // microseconds
  std::string coding;
  // children
  uint64_t changed_pages = 0, payloads_read = 0, chain_blocks = 0;
  bool content_ok = true;
};

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

Percentiles Of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size())))]; };
  return {at(0.50), at(0.99)};
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

uint64_t Zstd3(std::span<const uint8_t> bytes) {
  codec::Compressor c;
  std::vector<uint8_t> out;
  if (!c.Compress(bytes, 3, nullptr, &out).ok()) return 0;
  return out.size();
}

Setting ParseSetting(const std::string& s) {
  Setting out;
  out.name = s;
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, '+');) parts.push_back(p);
  bool ok = !parts.empty();
  for (size_t i = 0; ok && i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (i == 0 && p == "defaults") out.defaults = true;
    else if (i == 0 && p.size() >= 2 && p[0] == 'f' && std::isdigit(static_cast<unsigned char>(p[1]))) out.frame_pages = uint32_t(std::stoul(p.substr(1)));
    else if (i > 0 && p == "dict" && !out.defaults) out.dictionary = DictionaryMode::kOn;
    else if (i > 0 && p == "nodict" && !out.defaults) out.dictionary = DictionaryMode::kOff;
    else if (i > 0 && p == "plain") out.plain = true;
    else ok = false;
  }
  if (!ok) {
    std::fprintf(stderr, "bench_corpus: setting \"%s\" (expected defaults, fN, fN+dict, ...+plain)\n", s.c_str());
    std::exit(2);
  }
  return out;
}

WriterOptions OptionsFor(const Setting& s) {
  WriterOptions o;
  if (!s.defaults) {
    o.frame_pages = s.frame_pages;
    o.dictionary = s.dictionary;
  }
  o.code_against_parent = !s.plain;
  o.sink.sync = false;
  return o;
}

std::string Coding(const WriteSummary& sum) {
  std::ostringstream s;
  s << (sum.frame_pages ? "frames " + std::to_string(sum.frame_pages) : std::string("one frame"))
    << (sum.dictionary_bytes ? ", dictionary " : ", no dictionary");
  if (sum.dictionary_bytes) s << sum.dictionary_bytes / 1024 << " KiB";
  if (sum.based_blocks) s << ", " << sum.based_blocks << " blocks (" << sum.based_pages << " pages) against the parent";
  return s.str();
}

Result<WriteSummary> Save(const std::string& image, uint64_t raw, const std::string& out, WriterOptions o) {
  HLT_ASSIGN_OR_RETURN(auto w, CheckpointWriter::Create(out, std::move(o)));
  HLT_ASSIGN_OR_RETURN(uint32_t r, w->AddRegion("ram", 0, raw));
  HLT_RETURN_IF_ERROR(w->AttachImage(r, image));
  return w->Finish();
}

uint64_t ThreadCpuNs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return uint64_t(t.tv_sec) * 1000000000ull + uint64_t(t.tv_nsec);
}

// Random stored pages: how long until the page, and the whole block, are decoded.
void MeasureFaults(const CheckpointReader& r, int faults, Measure* m) {
  std::vector<std::pair<uint32_t, uint32_t>> stored;  // block, slot
  for (uint64_t g = 0; g < r.total_pages(); ++g) {
    const PageLocation loc = r.Locate(g);
    if (loc.kind == PageKind::kStored) stored.push_back({loc.block, loc.slot_in_block});
  }
  if (stored.empty()) return;
  std::mt19937_64 rng(42);
  std::vector<double> to_page, to_page_cpu, whole;
  std::vector<uint8_t> buf;
  for (int i = 0; i < faults; ++i) {
    const auto [b, slot] = stored[rng() % stored.size()];
    buf.resize(r.blocks()[b].raw_length());
    const size_t want = size_t(slot) * 4096;
    const uint64_t cpu0 = ThreadCpuNs();
    uint64_t cpu_page = 0;
    const auto t0 = Clock::now();
    Clock::time_point t_page{};
    Status s = r.ReadBlock(b, buf, nullptr, [&](size_t begin, size_t end) {
      if (begin <= want && want + 4096 <= end) {
        t_page = Clock::now();
        cpu_page = ThreadCpuNs();
      }
      return Status::Ok();
    }, want);
    const auto t1 = Clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "bench_corpus: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    to_page.push_back(Us(t_page - t0));
    to_page_cpu.push_back(double(cpu_page - cpu0) / 1e3);
    whole.push_back(Us(t1 - t0));
  }
  m->to_page = Of(to_page);
  m->to_page_cpu = Of(to_page_cpu);
  m->whole = Of(whole);
}

void ReadWhole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0) {
  }
}

Measure MeasureImage(const std::string& name, const std::string& image, uint64_t zstd, const Setting& s,
                     const std::string& work, int faults) {
  Measure m;
  m.image = name;
  m.setting = s.name;
  m.raw = std::filesystem::file_size(image);
  m.zstd = zstd;
  const std::string out = work + "/bench.hlt";
  const WriterOptions o = OptionsFor(s);
  auto sum = Save(image, m.raw, out, o);
  if (!sum) {
    std::fprintf(stderr, "bench_corpus: %s: %s\n", image.c_str(), sum.error().ToString().c_str());
    std::exit(1);
  }
  m.file = sum->file_bytes;
  m.blocks = sum->blocks;
  m.save_s = sum->seconds;
  m.coding = Coding(*sum);
  ReadWhole(out);
  auto r = CheckpointReader::Open(out);
  if (!r) {
    std::fprintf(stderr, "bench_corpus: %s: %s\n", out.c_str(), r.error().ToString().c_str());
    m.coding += " (UNREADABLE: " + r.error().message() + ")";
    return m;
  }
  MeasureFaults(**r, faults, &m);
  return m;
}

// The child: its size against zstd -3 of its changed pages alone, and a whole read of the chain.
Measure MeasureChild(const std::string& name, const std::string& parent_image, const std::string& child_image,
                     const Setting& s, const std::string& work, int faults) {
  const std::vector<uint8_t> parent = ReadFile(parent_image), child = ReadFile(child_image);
  if (parent.size() != child.size() || child.empty() || child.size() % 4096 != 0) {
    std::fprintf(stderr, "bench_corpus: %s and %s are not two images of one size\n", parent_image.c_str(),
                 child_image.c_str());
    std::exit(2);
  }
  std::vector<uint8_t> changed;
  Measure m;
  for (size_t at = 0; at < child.size(); at += 4096) {
    if (std::memcmp(parent.data() + at, child.data() + at, 4096) == 0) continue;
    changed.insert(changed.end(), child.begin() + long(at), child.begin() + long(at + 4096));
    ++m.changed_pages;
  }
  m.image = name;
  m.setting = s.name;
  m.raw = child.size();
  m.zstd = Zstd3(changed);
  const std::string parent_ckpt = work + "/parent.hlt", child_ckpt = work + "/child.hlt";
  WriterOptions o = OptionsFor(s);
  auto p = Save(parent_image, m.raw, parent_ckpt, o);
  auto pr = p ? CheckpointReader::Open(parent_ckpt) : Result<std::unique_ptr<CheckpointReader>>(p.error());
  if (!pr) std::exit(1);
  o.parent = std::shared_ptr<const CheckpointReader>(std::move(*pr));
  auto c = Save(child_image, m.raw, child_ckpt, o);
  if (!c) {
    std::fprintf(stderr, "bench_corpus: %s: %s\n", child_image.c_str(), c.error().ToString().c_str());
    std::exit(1);
  }
  // The parent's view blocks a restore of the parent alone would read: what the chain's restore adds to the child's.
  m.file = c->file_bytes;
  m.blocks = c->blocks;
  m.save_s = c->seconds;
  m.coding = Coding(*c);
  o.parent.reset();
  ReadWhole(parent_ckpt);
  ReadWhole(child_ckpt);
  auto r = CheckpointReader::Open(child_ckpt);
  if (!r) std::exit(1);
  const CheckpointReader& chain = **r;
  for (const ChainLevel& level : chain.chain()) m.chain_blocks += level.live_blocks;
  const uint64_t before = chain.read_stats().blocks_fetched;
  std::vector<uint8_t> raw;
  for (uint32_t b = 0; b < chain.blocks().size(); ++b) {
    raw.resize(chain.blocks()[b].raw_length());
    if (!chain.ReadBlock(b, raw).ok()) std::exit(1);
    for (const BlockMember& mem : chain.BlockMembers(b)) {
      if (std::memcmp(raw.data() + size_t(mem.slot) * 4096, child.data() + size_t(mem.page) * 4096, 4096) != 0) {
        m.content_ok = false;
      }
    }
  }
  m.payloads_read = chain.read_stats().blocks_fetched - before;
  MeasureFaults(chain, faults, &m);
  return m;
}

void PrintRow(const Measure& m) {
  std::printf("  %-14s %8.2f %7.3f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %7.2f  %s", m.setting.c_str(),
              double(m.file) / 1e6, double(m.file) / double(m.zstd), m.to_page.p50, m.to_page.p99, m.to_page_cpu.p50,
              m.to_page_cpu.p99, m.whole.p50, m.whole.p99, m.save_s, m.coding.c_str());
  if (m.changed_pages) {
    std::printf("; chain: %llu payloads read for %llu blocks%s", (unsigned long long)m.payloads_read,
                (unsigned long long)m.chain_blocks, m.content_ok ? "" : ", CONTENT WRONG");
  }
  std::printf("\n");
  std::fflush(stdout);
}

void Header(const std::string& what, const Measure& first) {
  std::printf("\n%s: %.1f MiB, zstd -3 %s %.2f MB%s\n", what.c_str(), double(first.raw) / 1048576,
              first.changed_pages ? "of the changed pages alone" : "of the whole image", double(first.zstd) / 1e6,
              first.changed_pages ? (" (" + std::to_string(first.changed_pages) + " changed pages)").c_str() : "");
  std::printf("  %-14s %8s %7s %8s %8s %8s %8s %8s %8s %7s  %s\n", "setting", "file MB", "x zstd", "page p50",
              "page p99", "cpu p50", "cpu p99", "blk p50", "blk p99", "save s", "coding");
}

void WriteOutputs(const std::vector<Measure>& all, const std::string& csv, const std::string& json) {
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "image,setting,raw_bytes,zstd3_bytes,file_bytes,ratio,page_p50_us,page_p99_us,page_cpu_p50_us,"
         "page_cpu_p99_us,block_p50_us,block_p99_us,"
         "save_s,blocks,changed_pages,payloads_read,chain_blocks,content_ok,coding\n";
    for (const auto& m : all) {
      f << m.image << "," << m.setting << "," << m.raw << "," << m.zstd << "," << m.file << ","
        << double(m.file) / double(m.zstd) << "," << m.to_page.p50 << "," << m.to_page.p99 << ","
        << m.to_page_cpu.p50 << "," << m.to_page_cpu.p99 << "," << m.whole.p50 << ","
        << m.whole.p99 << "," << m.save_s << "," << m.blocks << "," << m.changed_pages << "," << m.payloads_read << ","
        << m.chain_blocks << "," << (m.content_ok ? 1 : 0) << ",\"" << m.coding << "\"\n";
    }
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << "[\n";
    for (size_t i = 0; i < all.size(); ++i) {
      const auto& m = all[i];
      f << (i ? ",\n" : "") << "{\"image\":\"" << m.image << "\",\"setting\":\"" << m.setting << "\",\"raw_bytes\":"
        << m.raw << ",\"zstd3_bytes\":" << m.zstd << ",\"file_bytes\":" << m.file
        << ",\"ratio\":" << double(m.file) / double(m.zstd) << ",\"page_p50_us\":" << m.to_page.p50
        << ",\"page_p99_us\":" << m.to_page.p99 << ",\"page_cpu_p50_us\":" << m.to_page_cpu.p50
        << ",\"page_cpu_p99_us\":" << m.to_page_cpu.p99 << ",\"block_p50_us\":" << m.whole.p50
        << ",\"block_p99_us\":" << m.whole.p99 << ",\"save_s\":" << m.save_s << ",\"blocks\":" << m.blocks
        << ",\"changed_pages\":" << m.changed_pages << ",\"payloads_read\":" << m.payloads_read
        << ",\"chain_blocks\":" << m.chain_blocks << ",\"content_ok\":" << (m.content_ok ? "true" : "false")
        << ",\"coding\":\"" << m.coding << "\"}";
    }
    f << "\n]\n";
  }
}

std::pair<std::string, std::string> NameOf(const std::string& arg) {
  const auto eq = arg.rfind('=');
  if (eq != std::string::npos) return {arg.substr(0, eq), arg.substr(eq + 1)};
  const auto slash = arg.rfind('/');
  return {arg, slash == std::string::npos ? arg : arg.substr(slash + 1)};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> images, children;
  std::string csv, json, work, settings = "defaults,f16,f0,f16+dict,f0+dict,f32,f32+dict";
  int faults = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--child") children.push_back(next());
    else if (a == "--settings") settings = next();
    else if (a == "--faults") faults = std::stoi(next());
    else if (a == "--work") work = next();
    else if (a == "--csv") csv = next();
    else if (a == "--json") json = next();
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "usage: bench_corpus IMAGE[=NAME]... [--child PARENT:CHILD[=NAME]]... [--settings S,...] "
                           "[--faults N] [--work DIR] [--csv F] [--json F]\n");
      return 2;
    } else images.push_back(a);
  }
  std::vector<Setting> list;
  std::stringstream ss(settings);
  for (std::string one; std::getline(ss, one, ',');) list.push_back(ParseSetting(one));
  testing::TempDir tmp;
  if (work.empty()) work = tmp.path();
  std::printf("bench_corpus: %zu images, %zu children, settings %s; %d faults a cell (warm); baseline zstd -3\n",
              images.size(), children.size(), settings.c_str(), faults);
  std::vector<Measure> all;
  for (const std::string& arg : images) {
    const auto [path, name] = NameOf(arg);
    const uint64_t zstd = Zstd3(ReadFile(path));
    for (size_t i = 0; i < list.size(); ++i) {
      Measure m = MeasureImage(name, path, zstd, list[i], work, faults);
      if (i == 0) Header(name, m);
      PrintRow(m);
      all.push_back(m);
    }
  }
  for (const std::string& arg : children) {
    const auto [pair, name] = NameOf(arg);
    const auto colon = pair.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "bench_corpus: --child %s (expected PARENT_IMAGE:CHILD_IMAGE)\n", arg.c_str());
      return 2;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      Measure m = MeasureChild(name, pair.substr(0, colon), pair.substr(colon + 1), list[i], work, faults);
      if (i == 0) Header(name + " (child)", m);
      PrintRow(m);
      all.push_back(m);
    }
  }
  WriteOutputs(all, csv, json);
  return 0;
}
