#include "support/memory_corpus.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "support/test_rng.h"

namespace halite::testing {
namespace {

constexpr size_t kPage = 4096;

// The images' generator (support/test_rng.h).
using Rng = TestRng;

// Physical page frames of the image. Memory is handed out near a place (where related data was put: allocations
// close in time sit close in physical memory, as on a guest that has not run long) or anywhere.
class Frames {
 public:
  static constexpr uint64_t kAnywhere = UINT64_MAX;
  Frames(uint64_t pages, Rng& rng) : used_(pages, false), rng_(rng) {}
  uint64_t free_pages() const { return free_; }
  // A run of up to `n` consecutive free frames within `spread` pages of `near` (anywhere when none is found there,
  // shorter when no run is that long); its first frame and length. {0, 0} when the image is full.
  std::pair<uint64_t, uint64_t> Take(uint64_t n, uint64_t near, uint64_t spread) {
    const uint64_t pages = used_.size();
    if (free_ == 0) return {0, 0};
    n = std::max<uint64_t>(1, std::min(n, free_));
    for (int attempt = 0; attempt < 48; ++attempt) {
      uint64_t start;
      if (near != kAnywhere && attempt < 24) {
        const uint64_t lo = near > spread ? near - spread : 0;
        start = std::min(pages - 1, lo + rng_.Below(2 * spread + 1));
      } else {
        start = rng_.Below(pages);
      }
      uint64_t len = 0;
      while (len < n && start + len < pages && !used_[start + len]) ++len;
      if (len == n || (attempt >= 12 && len > 0)) return Mark(start, len);
    }
    uint64_t at = rng_.Below(pages);  // crowded: the next free frame after a random place
    while (used_[at]) at = (at + 1) % pages;
    return Mark(at, 1);
  }

 private:
  std::pair<uint64_t, uint64_t> Mark(uint64_t start, uint64_t len) {
    std::fill_n(used_.begin() + long(start), len, true);
    free_ -= len;
    return {start, len};
  }
  std::vector<bool> used_;
  uint64_t free_ = used_.size();
  Rng& rng_;
};

void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The image as a guest builds it over time: events (a file read into the page cache, a process's private copy of a
// library, a buffer filled from a file, heap objects, compressed data) drawn in proportion to what is left of each
// kind's share, each placed near related memory.
class ImageBuilder {
 public:
  ImageBuilder(std::span<const CorpusFile> pool, uint64_t pages, const ImageRecipe& recipe, uint64_t seed)
      : pool_(pool), recipe_(recipe), image_(pages * kPage, 0), rng_(seed), frames_(pages, rng_),
        home_(pool.size(), Frames::kAnywhere) {
    for (size_t i = 0; i < pool.size(); ++i) {
      if (pool[i].bytes.empty()) continue;
      (pool[i].kind == CorpusFile::Kind::kLibrary    ? libraries_
       : pool[i].kind == CorpusFile::Kind::kText     ? texts_
                                                     : compressed_)
          .push_back(i);
    }
    to_read_ = libraries_;
    to_read_.insert(to_read_.end(), texts_.begin(), texts_.end());
    Shuffle(to_read_);
    popular_ = libraries_;
    Shuffle(popular_);
    popular_.resize(std::min<size_t>(popular_.size(), 12));
    Shuffle(compressed_);
    for (size_t f : to_read_) {
      if (pool_[f].bytes.size() <= 192 * 1024 && small_.size() < 24) small_.push_back(f);
    }
    for (unsigned i = 0; i < std::max(1u, recipe.processes); ++i) {
      bases_.push_back(0x7f0000000000ull + (rng_.Below(1u << 24) << 12));
    }
  }

  std::vector<uint8_t> Build() {
    const double pages = double(image_.size() / kPage);
    uint64_t left[5] = {uint64_t(recipe_.page_cache * pages), uint64_t(recipe_.private_copies * pages),
                        uint64_t(recipe_.heap_copies * pages), uint64_t(recipe_.heap_objects * pages),
                        uint64_t(recipe_.compressed * pages)};
    for (;;) {
      const uint64_t total = left[0] + left[1] + left[2] + left[3] + left[4];
      if (total == 0 || frames_.free_pages() == 0) break;
      uint64_t pick = rng_.Below(total);
      int kind = 0;
      while (pick >= left[kind]) pick -= left[kind++];
      uint64_t used = 0;
      switch (kind) {
        case 0: used = ReadFile(left[0]); break;
        case 1: used = PrivateCopy(left[1]); break;
        case 2: used = HeapCopy(left[2]); break;
        case 3: used = Objects(left[3]); break;
        default: used = CompressedData(left[4]); break;
      }
      left[kind] = used == 0 ? 0 : left[kind] - std::min(used, left[kind]);  // nothing more of a kind that made nothing
    }
    return std::move(image_);
  }

 private:
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng_.Below(i)]);
  }

  // Near the previous allocation (memory handed out in order), or, now and then, anywhere (a guest that ran a while).
  std::pair<uint64_t, uint64_t> Next(uint64_t n) {
    const uint64_t near = rng_.Chance(0.25) ? Frames::kAnywhere : cursor_;
    auto run = frames_.Take(n, near, 64);
    cursor_ = run.first + run.second;
    return run;
  }

  // The file's pages into frames from `at` on, `len` pages from file page `p`.
  void PutFilePages(const std::vector<uint8_t>& bytes, uint64_t p, uint64_t at, uint64_t len) {
    for (uint64_t i = 0; i < len; ++i) {
      const size_t from = (p + i) * kPage;
      std::memcpy(image_.data() + (at + i) * kPage, bytes.data() + from, std::min(kPage, bytes.size() - from));
    }
  }

  // The next file into the page cache; once every file is cached, another copy of one (another container's, or
  // another version: each page edited in a few bytes with probability one half).
  uint64_t ReadFile(uint64_t budget) {
    if (to_read_.empty()) return 0;
    if (next_read_ < to_read_.size()) return ToPageCache(to_read_[next_read_++], budget, false);
    return ToPageCache(to_read_[rng_.Below(to_read_.size())], budget, rng_.Chance(0.5));
  }

  uint64_t ToPageCache(size_t f, uint64_t budget, bool edited = false) {
    const auto& bytes = pool_[f].bytes;
    const uint64_t file_pages = std::min<uint64_t>((bytes.size() + kPage - 1) / kPage, budget);
    uint64_t p = 0;
    while (p < file_pages) {
      auto [at, len] = Next(std::min<uint64_t>(rng_.Between(4, std::max(4u, recipe_.readahead_pages)), file_pages - p));
      if (len == 0) break;
      if (p == 0 && home_[f] == Frames::kAnywhere) home_[f] = at;
      PutFilePages(bytes, p, at, len);
      for (uint64_t i = 0; edited && i < len; ++i) {
        uint8_t* page = image_.data() + (at + i) * kPage;
        for (uint64_t n = rng_.Chance(0.5) ? rng_.Between(1, 8) : 0; n > 0; --n) page[rng_.Below(kPage)] ^= 0x20;
      }
      p += len;
    }
    return p;
  }

  // A process's copy of a popular library, relocated to its base and partly written, near the library's page cache
  // pages when it is cached (it was read from there).
  uint64_t PrivateCopy(uint64_t budget) {
    if (popular_.empty()) return 0;
    const size_t f = popular_[rng_.Below(popular_.size())];
    const uint64_t base = bases_[rng_.Below(bases_.size())];
    const auto& bytes = pool_[f].bytes;
    const uint64_t file_pages = std::min<uint64_t>((bytes.size() + kPage - 1) / kPage, budget);
    uint64_t p = 0;
    while (p < file_pages) {
      auto [at, len] = frames_.Take(std::min<uint64_t>(rng_.Between(16, 128), file_pages - p),
                                    home_[f] == Frames::kAnywhere ? cursor_ : home_[f] + p, 512);
      if (len == 0) break;
      PutFilePages(bytes, p, at, len);
      for (uint64_t i = 0; i < len; ++i) Relocate(image_.data() + (at + i) * kPage, bytes.size(), base);
      p += len;
    }
    return p;
  }

  // A worker's buffers holding a popular small file (a configuration, a script, a library's piece that every worker
  // of a server loads): the file read into a buffer at an arbitrary offset, and right after it a working copy of
  // it with a few bytes changed in every KiB (pointers fixed up, counters, flags). Every worker holds the same files,
  // so the same content recurs all over memory, and twice within a few dozen pages.
  uint64_t HeapCopy(uint64_t budget) {
    if (small_.empty()) return 0;
    const auto& bytes = pool_[small_[rng_.Below(small_.size())]].bytes;
    const uint64_t want = std::min<uint64_t>((2 * bytes.size() + 64 + kPage - 1) / kPage, budget);
    auto [at_frame, len] = Next(want);
    if (len == 0) return 0;
    uint8_t* out = image_.data() + at_frame * kPage;
    const size_t room = len * kPage;
    size_t at = 16 * rng_.Below(4);  // after a malloc header
    for (int copy = 0; copy < 2 && at < room; ++copy) {
      const size_t n = std::min(room - at, bytes.size());
      std::memcpy(out + at, bytes.data(), n);
      for (size_t e = at + rng_.Below(1024); copy == 1 && e < at + n; e += 1 + rng_.Below(1024)) out[e] ^= uint8_t(rng_.Next());
      at += (n + 16 + 15) / 16 * 16;
    }
    return len;
  }

  uint64_t Objects(uint64_t budget) {
    auto [at, len] = Next(std::min<uint64_t>(rng_.Between(1, 16), budget));
    if (len == 0) return 0;
    uint8_t* out = image_.data() + at * kPage;
    const size_t object = size_t(16) << rng_.Below(4);  // 16..128-byte objects in this run
    for (size_t o = 0; o + object <= len * kPage; o += object) Object(out + o, object);
    return len;
  }

  uint64_t CompressedData(uint64_t budget) {
    if (next_compressed_ < compressed_.size()) return ToPageCache(compressed_[next_compressed_++], budget);
    auto [at, len] = Next(std::min<uint64_t>(rng_.Between(4, 32), budget));
    for (size_t i = 0; i < len * kPage; i += 8) Put64(image_.data() + at * kPage + i, rng_.Next());
    return len;
  }

  void Relocate(uint8_t* page, uint64_t file_size, uint64_t base) {
    for (size_t i = 0; i < kPage; i += 8) {
      const uint64_t v = Get64(page + i);
      if (v >= 64 && v < file_size && (v & 7) == 0) Put64(page + i, base + v);
    }
    for (uint64_t n = rng_.Chance(0.4) ? rng_.Between(1, 24) : 0; n > 0; --n) {
      Put64(page + 8 * rng_.Below(kPage / 8), rng_.Chance(0.5) ? rng_.Below(1u << 16) : base + rng_.Below(1u << 22));
    }
  }

  void Object(uint8_t* o, size_t size) {
    const uint64_t heap = 0x55d000000000ull;
    Put64(o, rng_.Chance(0.7) ? heap + 16 * rng_.Below(1u << 22) : 0);  // next
    Put64(o + 8, rng_.Below(1u << 12));                                 // a count, an id
    for (size_t at = 16; at + 8 <= size; at += 8) {
      const uint64_t r = rng_.Below(10);
      if (r < 3) {
        Put64(o + at, heap + 16 * rng_.Below(1u << 22));
      } else if (r < 5) {
        Put64(o + at, rng_.Below(256));
      } else if (r < 7 && !texts_.empty() && at + 24 <= size) {  // a short string from a text file
        const auto& text = pool_[texts_[rng_.Below(texts_.size())]].bytes;
        const size_t n = std::min<size_t>({size - at, 40, text.size()});
        std::memcpy(o + at, text.data() + rng_.Below(text.size() - n + 1), n);
        at += (n + 7) / 8 * 8 - 8;
      }
    }
  }

  std::span<const CorpusFile> pool_;
  ImageRecipe recipe_;
  std::vector<uint8_t> image_;
  Rng rng_;
  Frames frames_;
  uint64_t cursor_ = 0;
  std::vector<uint64_t> home_;  // file -> its first page-cache frame (kAnywhere when not cached)
  std::vector<size_t> libraries_, texts_, compressed_, popular_, small_, to_read_;
  size_t next_read_ = 0, next_compressed_ = 0;
  std::vector<uint64_t> bases_;  // each process's load address
};

// A generated word or phrase: lowercase letters (words) or arbitrary bytes (binary phrases).
std::string Token(Rng& rng, size_t min, size_t max, bool binary) {
  std::string s(rng.Between(min, max), ' ');
  for (auto& c : s) c = binary ? char(rng.Below(256)) : char('a' + rng.Below(26));
  return s;
}

std::vector<uint8_t> GeneratedLibrary(Rng& rng, size_t size, const std::vector<std::string>& shared) {
  std::vector<std::string> own(256);
  for (auto& p : own) p = Token(rng, 6, 48, true);
  std::vector<uint8_t> out;
  out.reserve(size);
  const size_t code_end = size * 4 / 5;
  while (out.size() < code_end) {  // code: phrases of this library and of every library, with call offsets
    const std::string& p = rng.Chance(0.3) ? shared[rng.Below(shared.size())] : own[rng.Below(own.size())];
    out.insert(out.end(), p.begin(), p.end());
    const uint32_t rel = uint32_t(rng.Below(1u << 16));
    out.push_back(0xe8);
    for (int i = 0; i < 4; ++i) out.push_back(uint8_t(rel >> (8 * i)));
  }
  out.resize(code_end);
  while (out.size() < size) {  // data: offsets into the library (relocated by each process), small values, names
    uint8_t w[8];
    const uint64_t r = rng.Below(4);
    Put64(w, r < 2 ? 8 * rng.Below(size / 8) : r == 2 ? rng.Below(64) : 0);
    out.insert(out.end(), w, w + 8);
    if (rng.Chance(0.05)) {
      const std::string name = Token(rng, 8, 24, false);
      out.insert(out.end(), name.begin(), name.end());
      out.resize((out.size() + 7) / 8 * 8, 0);
    }
  }
  out.resize(size);
  return out;
}

std::vector<uint8_t> GeneratedText(Rng& rng, size_t size, const std::vector<std::string>& vocabulary) {
  std::vector<std::string> phrases(64);
  for (auto& p : phrases) {
    for (int w = int(rng.Between(3, 9)); w > 0; --w) p += vocabulary[rng.Below(vocabulary.size())] + " ";
  }
  std::vector<uint8_t> out;
  out.reserve(size + 256);
  while (out.size() < size) {
    std::string line(size_t(rng.Below(4) * 2), ' ');
    for (int w = int(rng.Between(2, 8)); w > 0; --w) {
      line += rng.Chance(0.3) ? phrases[rng.Below(phrases.size())] : vocabulary[rng.Below(vocabulary.size())] + " ";
    }
    line.back() = '\n';
    out.insert(out.end(), line.begin(), line.end());
  }
  out.resize(size);
  return out;
}

}  // namespace

std::vector<uint8_t> BuildMemoryImage(std::span<const CorpusFile> pool, uint64_t pages, const ImageRecipe& recipe,
                                      uint64_t seed) {
  return ImageBuilder(pool, pages, recipe, seed).Build();
}

std::vector<CorpusFile> GeneratedPool(uint64_t bytes, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::string> shared(512), vocabulary(4000);
  for (auto& p : shared) p = Token(rng, 6, 48, true);
  for (auto& w : vocabulary) w = Token(rng, 2, 11, false);
  std::vector<CorpusFile> pool;
  for (uint64_t made = 0; made < bytes;) {
    CorpusFile f;
    const bool library = rng.Chance(0.5);
    const size_t size = library ? size_t(rng.Between(64, 2048)) * 1024 : size_t(rng.Between(4, 256)) * 1024;
    f.kind = library ? CorpusFile::Kind::kLibrary : CorpusFile::Kind::kText;
    f.name = (library ? "lib" : "text") + std::to_string(pool.size());
    f.bytes = library ? GeneratedLibrary(rng, size, shared) : GeneratedText(rng, size, vocabulary);
    made += size;
    pool.push_back(std::move(f));
  }
  return pool;
}

std::vector<uint64_t> RewritePages(std::span<uint8_t> image, double fraction_rewritten, double fraction_zeroed,
                                   uint64_t seed) {
  Rng rng(seed ^ 0xC4A16E);
  const uint64_t pages = image.size() / kPage;
  std::vector<uint64_t> nonzero;
  for (uint64_t p = 0; p < pages; ++p) {
    const uint8_t* page = image.data() + p * kPage;
    if (std::any_of(page, page + kPage, [](uint8_t b) { return b != 0; })) nonzero.push_back(p);
  }
  for (size_t i = nonzero.size(); i > 1; --i) std::swap(nonzero[i - 1], nonzero[rng.Below(i)]);
  const size_t rewritten = std::min(nonzero.size(), size_t(fraction_rewritten * double(pages)));
  const size_t zeroed = std::min(nonzero.size() - rewritten, size_t(fraction_zeroed * double(pages)));
  std::vector<uint64_t> changed(nonzero.begin(), nonzero.begin() + long(rewritten + zeroed));
  for (size_t i = 0; i < changed.size(); ++i) {
    uint8_t* page = image.data() + changed[i] * kPage;
    if (i >= rewritten) {
      std::memset(page, 0, kPage);
      continue;
    }
    const size_t at = 8 * rng.Below(8);
    for (size_t line = 0; line < kPage; line += 64) Put64(page + line + at, rng.Next());
  }
  std::sort(changed.begin(), changed.end());
  return changed;
}

}  // namespace halite::testing
