// make_corpus_image: the generated images of the compression corpus (bench/core/README.md, "Corpus").
//
//   make_corpus_image repeats OUT [--mib N] [--seed S] [--usr DIR] [--distinct-mib M]
//                                           memory built from M (8) MiB of files under DIR (default /usr): most of it
//                                           workers' buffers holding the same small files at byte offsets, twice
//                                           each (read, then a working copy), plus page cache, relocated library
//                                           copies and heap objects: content repeated across distant pages
//   make_corpus_image mixed OUT [...]       the same parts in other shares, from every file picked (page cache 0.30,
//                                           library copies 0.12, buffers 0.10, objects 0.14, compressed 0.04)
//   make_corpus_image sources OUT [...]     a page cache full of source files (headers, Python, Perl)
//   make_corpus_image generated OUT [...]   as repeats, from generated files (what the unit tests use)
//   make_corpus_image random OUT [...]      random bytes (compressed or encrypted memory)
//   make_corpus_image zero OUT [...]        95% zero pages, the rest as repeats
//   make_corpus_image rewrite IN OUT [--rewritten F] [--zeroed F] [--seed S]
//                                           the next save of IN's guest: F (0.03) of its non-zero pages partly
//                                           rewritten (8 bytes in every 64), F (0.01) zeroed
//
// Each image gets OUT.manifest: the recipe, the seed, every file used (path and size) and the image's XXH3-128, so
// that a run on another machine (another /usr) can say what it measured.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "codec/hashing.h"
#include "support/memory_corpus.h"

namespace fs = std::filesystem;
using halite::testing::CorpusFile;

namespace {

struct Options {
  std::string kind, in, out, usr = "/usr";
  uint64_t mib = 256, seed = 1, distinct_mib = 0;
  double rewritten = 0.03, zeroed = 0.01;
  std::vector<std::pair<std::string, double>> shares;  // recipe overrides (--page-cache F, ...)
};

uint64_t Mix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool IsElf(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  char m[4] = {};
  f.read(m, 4);
  return f && m[0] == 0x7f && m[1] == 'E' && m[2] == 'L' && m[3] == 'F';
}

// Regular files (no symlinks) under `dirs` accepted by `want`, sorted, sizes within [min, max].
std::vector<fs::path> Candidates(const std::vector<fs::path>& dirs, uint64_t min, uint64_t max,
                                 bool (*want)(const fs::path&)) {
  std::vector<fs::path> out;
  for (const fs::path& d : dirs) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(d, fs::directory_options::skip_permission_denied, ec), end; it != end;
         it.increment(ec)) {
      if (ec) break;
      std::error_code e2;
      if (!it->is_regular_file(e2) || it->is_symlink(e2)) continue;
      const uint64_t size = it->file_size(e2);
      if (e2 || size < min || size > max || !want(it->path())) continue;
      out.push_back(it->path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Seeded choice of files from `candidates` until `budget` bytes.
void Pick(std::vector<fs::path> candidates, uint64_t budget, CorpusFile::Kind kind, uint64_t* rng,
          std::vector<CorpusFile>* pool) {
  for (size_t i = candidates.size(); i > 1; --i) std::swap(candidates[i - 1], candidates[Mix(rng) % i]);
  uint64_t taken = 0;
  for (const fs::path& p : candidates) {
    if (taken >= budget) break;
    std::ifstream f(p, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.empty()) continue;
    taken += bytes.size();
    pool->push_back({p.string(), kind, std::move(bytes)});
  }
}

std::vector<CorpusFile> UsrPool(const Options& o, bool sources_only) {
  const fs::path usr = o.usr;
  uint64_t rng = o.seed * 7919 + 17;
  std::vector<CorpusFile> pool;
  const uint64_t image = o.distinct_mib ? o.distinct_mib << 20 : o.mib << 20;
  auto text = [](const fs::path& p) {
    const std::string s = p.string();
    return EndsWith(s, ".h") || EndsWith(s, ".py") || EndsWith(s, ".pm") || EndsWith(s, ".c") || EndsWith(s, ".txt");
  };
  Pick(Candidates({usr / "include", usr / "lib/python3", usr / "lib/python3.11", usr / "share/perl"}, 1024, 4 << 20,
                  text),
       sources_only ? image : image / 4, CorpusFile::Kind::kText, &rng, &pool);
  if (sources_only) return pool;
  auto library = [](const fs::path& p) { return p.string().find(".so") != std::string::npos && IsElf(p); };
  Pick(Candidates({usr / "lib/x86_64-linux-gnu"}, 64 << 10, 8 << 20, library), image / 4, CorpusFile::Kind::kLibrary,
       &rng, &pool);
  Pick(Candidates({usr / "bin"}, 32 << 10, 4 << 20, IsElf), image / 10, CorpusFile::Kind::kLibrary, &rng, &pool);
  auto gz = [](const fs::path& p) { return EndsWith(p.string(), ".gz"); };
  Pick(Candidates({usr / "share/doc", usr / "share/man"}, 4096, 1 << 20, gz), image / 20, CorpusFile::Kind::kCompressed,
       &rng, &pool);
  return pool;
}

int WriteImage(const Options& o, const std::vector<uint8_t>& image, const std::string& recipe,
               const std::vector<CorpusFile>& pool) {
  {
    std::ofstream f(o.out, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(image.data()), std::streamsize(image.size()));
    if (!f) {
      std::cerr << "make_corpus_image: cannot write " << o.out << "\n";
      return 3;
    }
  }
  const auto h = halite::codec::Xxh3_128(image);
  std::ofstream m(o.out + ".manifest", std::ios::trunc);
  m << "image " << fs::path(o.out).filename().string() << "\nkind " << o.kind << "\nbytes " << image.size()
    << "\nseed " << o.seed << "\nrecipe " << recipe << "\nxxh3_128 " << std::hex << h.high << h.low << std::dec << "\n";
  std::map<CorpusFile::Kind, std::pair<uint64_t, uint64_t>> totals;
  for (const auto& f : pool) {
    totals[f.kind].first += 1;
    totals[f.kind].second += f.bytes.size();
  }
  m << "pool libraries " << totals[CorpusFile::Kind::kLibrary].first << " files "
    << totals[CorpusFile::Kind::kLibrary].second << " bytes, text " << totals[CorpusFile::Kind::kText].first
    << " files " << totals[CorpusFile::Kind::kText].second << " bytes, compressed "
    << totals[CorpusFile::Kind::kCompressed].first << " files " << totals[CorpusFile::Kind::kCompressed].second
    << " bytes\n";
  for (const auto& f : pool) m << "file " << f.bytes.size() << " " << f.name << "\n";
  std::printf("%s: %s, %zu pool files\n", o.out.c_str(), recipe.c_str(), pool.size());
  return m ? 0 : 3;
}

int Rewrite(const Options& o) {
  std::ifstream f(o.in, std::ios::binary);
  std::vector<uint8_t> image((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (image.empty() || image.size() % 4096 != 0) {
    std::cerr << "make_corpus_image: " << o.in << ": not a memory image (empty or not a multiple of 4096 bytes)\n";
    return 3;
  }
  const auto changed = halite::testing::RewritePages(image, o.rewritten, o.zeroed, o.seed);
  const std::string recipe = "rewrite of " + o.in + ": " + std::to_string(o.rewritten) + " of the pages rewritten (8 " +
                             "bytes in every 64), " + std::to_string(o.zeroed) + " zeroed; " +
                             std::to_string(changed.size()) + " pages changed";
  return WriteImage(o, image, recipe, {});
}

int Usage() {
  std::cerr << "usage: make_corpus_image repeats|mixed|sources|generated|random|zero OUT [--mib N] [--seed S] [--usr DIR]\n"
               "         [--distinct-mib M] [--page-cache F] [--private-copies F] [--heap-copies F] [--heap-objects F] [--compressed F]\n"
               "         [--processes N] [--readahead PAGES]\n"
               "       make_corpus_image rewrite IN OUT [--rewritten F] [--zeroed F] [--seed S]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--mib") o.mib = std::stoull(next());
    else if (a == "--seed") o.seed = std::stoull(next());
    else if (a == "--usr") o.usr = next();
    else if (a == "--distinct-mib") o.distinct_mib = std::stoull(next());
    else if (a == "--rewritten") o.rewritten = std::stod(next());
    else if (a == "--zeroed") o.zeroed = std::stod(next());
    else if (a == "--page-cache" || a == "--private-copies" || a == "--heap-copies" || a == "--heap-objects" ||
             a == "--compressed" || a == "--processes" || a == "--readahead")
      o.shares.push_back({a, std::stod(next())});
    else if (!a.empty() && a[0] == '-') return Usage();
    else pos.push_back(a);
  }
  if (pos.empty()) return Usage();
  o.kind = pos[0];
  if (o.kind == "rewrite") {
    if (pos.size() != 3) return Usage();
    o.in = pos[1];
    o.out = pos[2];
    return Rewrite(o);
  }
  if (pos.size() != 2 || o.mib == 0) return Usage();
  o.out = pos[1];
  const uint64_t pages = (o.mib << 20) / 4096;
  halite::testing::ImageRecipe r;
  std::vector<CorpusFile> pool;
  std::string recipe;
  if (o.kind == "repeats") {
    // Issue 28's kind of memory: the same content all over it, never page-aligned or never quite equal.
    if (o.distinct_mib == 0) o.distinct_mib = 8;
    pool = UsrPool(o, false);
    r = {0.10, 0.10, 0.60, 0.10, 0.04, 6, 128};
    recipe = "repeats from files under " + o.usr + " (" + std::to_string(o.distinct_mib) + " MiB of them)";
  } else if (o.kind == "mixed" || o.kind == "zero") {
    pool = UsrPool(o, false);
    if (o.kind == "zero") r = {0.02, 0.01, 0.01, 0.01, 0.0, 6, 128};
    recipe = o.kind + " from files under " + o.usr;
  } else if (o.kind == "sources") {
    pool = UsrPool(o, true);
    r = {0.80, 0.0, 0.05, 0.05, 0.0, 6, 128};
    recipe = "page cache of source files under " + o.usr;
  } else if (o.kind == "generated") {
    pool = halite::testing::GeneratedPool(o.mib << 18, o.seed);
    recipe = "repeats from generated files";
  } else if (o.kind == "random") {
    r = {0.0, 0.0, 0.0, 0.0, 1.0, 6, 128};
    recipe = "random bytes";
  } else {
    return Usage();
  }
  for (const auto& [name, v] : o.shares) {
    if (name == "--page-cache") r.page_cache = v;
    if (name == "--private-copies") r.private_copies = v;
    if (name == "--heap-copies") r.heap_copies = v;
    if (name == "--heap-objects") r.heap_objects = v;
    if (name == "--compressed") r.compressed = v;
    if (name == "--processes") r.processes = unsigned(v);
    if (name == "--readahead") r.readahead_pages = uint32_t(v);
  }
  if (pool.empty() && o.kind != "random") {
    std::cerr << "make_corpus_image: no usable files under " << o.usr << "\n";
    return 3;
  }
  char fractions[200];
  std::snprintf(fractions, sizeof fractions, " (page cache %.2f, private copies %.2f, heap copies %.2f, objects %.2f, "
                "compressed %.2f, %u processes, readahead %u pages)", r.page_cache, r.private_copies, r.heap_copies,
                r.heap_objects, r.compressed, r.processes, r.readahead_pages);
  const auto image = halite::testing::BuildMemoryImage(pool, pages, r, o.seed);
  return WriteImage(o, image, recipe + fractions, pool);
}
