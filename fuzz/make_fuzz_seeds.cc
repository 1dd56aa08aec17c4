// hlt-fuzz-seeds OUTDIR [VECTOR_DIR]: writes seed inputs for every fuzz target, OUTDIR/<target>/<name>.
//
// Seeds are small checkpoints made by the deterministic writer (fixed file ids, creation time 0), plus the test
// vectors under VECTOR_DIR when given, and what each table decoder sees of them (header, footer, index, block
// payloads), in each target's input encoding. `scripts/fuzz` runs this before fuzzing; fuzz/corpus/ holds its
// committed output (regenerate with `hlt-fuzz-seeds fuzz/corpus format-spec/test-vectors`).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "chain_input.h"
#include "codec/zstd_codec.h"
#include "halite/bytes.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/authentication.h"
#include "halite/checkpoint_writer.h"
#include "halite/format_constants.h"

namespace {

using namespace halite;
namespace fs = std::filesystem;

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> Page(uint32_t kind, uint32_t n) {
  std::vector<uint8_t> p(4096, 0);
  uint64_t x = 0x9E3779B97F4A7C15ull * (n + 1);
  for (size_t i = 0; i < p.size(); ++i) {
    switch (kind % 4) {
      case 0: p[i] = uint8_t("the quick brown fox jumps over the lazy dog\n"[i % 44]); break;
      case 1: p[i] = uint8_t(i % 8 == 0 ? n : 0); break;
      case 2: x ^= x << 13, x ^= x >> 7, x ^= x << 17, p[i] = uint8_t(x); break;
      case 3: p[i] = uint8_t(i / 64 + n); break;
    }
  }
  return p;
}

Result<std::vector<uint8_t>> Build(int variant) {
  WriterOptions o;
  o.deterministic = true;
  o.threads = 1;
  o.dictionary = DictionaryMode::kOff;
  o.sink.sync = false;
  FileId id{};
  id[0] = uint8_t(0xF0 + variant);
  id[15] = 0x5A;
  o.file_id = id;
  o.metadata.creator = "hlt-fuzz-seeds";
  o.block_pages = variant == 0 ? 2 : 8;
  if (variant == 3) {
    MacKey key;
    for (size_t i = 0; i < key.size(); ++i) key[i] = uint8_t(i);  // the key the checkpoint fuzz target uses
    o.mac_key = key;
  }
  if (variant == 2) {
    o.metadata.vmm_kind = VmmKind::kQemu;
    o.metadata.machine_type = "pc-i440fx-7.2";
  }
  std::vector<uint8_t> out;
  HLT_ASSIGN_OR_RETURN(auto w, CheckpointWriter::Create(NewMemorySink("seed.hlt", &out), o));
  HLT_ASSIGN_OR_RETURN(uint32_t ram, w->AddRegion(variant == 2 ? "pc.ram" : "ram", 0, 16 * 4096));
  uint32_t pages = variant == 0 ? 4 : 16;
  for (uint32_t p = 0; p < pages; ++p) {
    if (p % 5 == 4) continue;  // absent
    auto page = p % 7 == 6 ? std::vector<uint8_t>(4096, 0) : Page(p % 4, p % 3 == 2 ? 0 : p);
    HLT_RETURN_IF_ERROR(w->PutPage(ram, p, page));
  }
  if (variant >= 1) {
    std::vector<uint8_t> state(700);
    for (size_t i = 0; i < state.size(); ++i) state[i] = uint8_t(i % 13);
    HLT_RETURN_IF_ERROR(w->AddBlob("device-state", state));
    HLT_RETURN_IF_ERROR(w->AddBlob("tiny", std::vector<uint8_t>{1, 2, 3}));
  }
  if (variant == 2) {
    HLT_ASSIGN_OR_RETURN(uint32_t vram, w->AddRegion("0000:00:02.0/vga.vram", 1 << 30, 8 * 4096, 16384));
    for (uint32_t p = 0; p < 8; p += 2) HLT_RETURN_IF_ERROR(w->PutPage(vram, p, Page(3, p)));
    PageRun hot[] = {{PageRef{ram, 5}, 3, 0}, {PageRef{vram, 2}, 1, 0}};
    HLT_RETURN_IF_ERROR(w->AddAccessedPages(hot));
    PageRun va[] = {{PageRef{ram, 12}, 2, 0}, {PageRef{ram, 0}, 2, 1}};
    HLT_RETURN_IF_ERROR(w->AddVaRuns(va));
  }
  HLT_RETURN_IF_ERROR(w->Finish().status());
  return out;
}

std::vector<uint8_t> Le64(uint64_t v) {
  std::vector<uint8_t> b(8);
  halite::StoreLe64(b.data(), v);
  return b;
}
std::vector<uint8_t> Cat(std::vector<uint8_t> a, std::span<const uint8_t> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What each table decoder and the block decoder see of one checkpoint, in their targets' encodings.
void Derive(const Seed& ck, std::vector<Seed>* header, std::vector<Seed>* footer, std::vector<Seed>* index,
            std::vector<Seed>* block) {
  const auto& f = ck.bytes;
  if (f.size() < 128) return;
  header->push_back({ck.name, std::vector<uint8_t>(f.begin(), f.begin() + 64)});
  footer->push_back({ck.name, Cat(Le64(f.size()), std::span(f).last(64))});
  auto ft = format::DecodeFooter(std::span(f).last(64), f.size(), ck.name);
  if (!ft) return;
  auto idx = std::span(f).subspan(ft->index_offset, ft->index_length);
  index->push_back({ck.name, Cat(Le64(ft->index_offset), idx)});
  auto m = format::DecodeIndex(idx, ft->index_offset, ck.name);
  if (!m) return;
  for (size_t i = 0; i < m->blocks.size() && i < 3; ++i) {
    const auto& b = m->blocks[i];
    if (!b.compressed()) continue;
    bool dict = b.uses_dictionary();
    std::vector<uint8_t> s{uint8_t(dict ? 3 : 2)};
    uint8_t le[4];
    halite::StoreLe32(le, uint32_t(b.raw_length()));
    s.insert(s.end(), le, le + 4);
    halite::StoreLe32(le, uint32_t(dict ? m->dictionary.size() : 0));
    s.insert(s.end(), le, le + 4);
    if (dict) s.insert(s.end(), m->dictionary.begin(), m->dictionary.end());
    s = Cat(s, std::span(f).subspan(b.offset, b.stored_length));
    block->push_back({ck.name + ".block" + std::to_string(i), s});
  }
  for (size_t i = 0; i < m->blobs.size(); ++i) {
    const auto& b = m->blobs[i];
    if (!b.compressed()) continue;
    std::vector<uint8_t> s{2};
    uint8_t le[4];
    halite::StoreLe32(le, uint32_t(b.raw_length));
    s.insert(s.end(), le, le + 4);
    halite::StoreLe32(le, 0);
    s.insert(s.end(), le, le + 4);
    s = Cat(s, std::span(f).subspan(b.offset, b.stored_length));
    block->push_back({ck.name + ".blob" + std::to_string(i), s});
  }
}

std::vector<Seed> HintSeeds() {
  auto text = [](uint8_t selector, const std::string& extra, const std::string& t) {
    // FuzzInput::Printable(1, U8() % 24 + 1) reads the maximum length, then the length, then the characters.
    std::vector<uint8_t> s{selector, uint8_t(extra.size() - 1), uint8_t(extra.size() - 1)};
    for (char c : extra) s.push_back(uint8_t(c - 0x20));  // Printable() maps byte b to 0x20 + b % 95
    s.insert(s.end(), t.begin(), t.end());
    return s;
  };
  return {
      {"access", text(1, "extra", "# touched first\npc.ram:12\nram:88 16   # a run\n0x20\n7 0x3\n")},
      {"va", text(1, "x", "4 8\n77\n\n# space 2\n900 64\n0000:00:02.0/vga.vram:3 2\n\n\na:b:0\n")},
      {"replay", text(0, "dev:0", "pc.ram:100\npc.ram:101 w\n5 r\n/rom@etc/acpi/tables:31\ndev:0:7 w\n")},
      {"errors", text(1, "y", "ram:1000\nnope:1\n12 0\n1 2 3\n0x\n")},
  };
}

std::vector<Seed> ProgramSeeds() {
  std::vector<Seed> out;
  for (uint32_t n = 0; n < 8; ++n) {
    std::vector<uint8_t> s(96 + 64 * n);
    uint64_t x = 0x2545F4914F6CDD1Dull * (n + 1);
    for (auto& b : s) x ^= x << 13, x ^= x >> 7, x ^= x << 17, b = uint8_t(x);
    out.push_back({"program" + std::to_string(n), s});
  }
  return out;
}

// Programs for the writer target that reach its child phase with pages a writer codes against the parent (5.4
// BASED): a parent of 48 incompressible pages in blocks of `parent_block` pages, then a child that keeps all but
// one page in `every` and rewrites 8 bytes in every 64 of those (with some replaced, zeroed or dropped), coded
// against the parent, with the coding options of the shape. A block of which a quarter or more changed is stored
// again whole (parent_rewrite_fraction 0.25) unless `references` (2.0: every equal page stays a reference); either
// way the changed pages of the others are BASED. The bytes follow writer_roundtrip_fuzz.cc's reading order.
std::vector<Seed> ChildProgramSeeds() {
  struct Shape {
    const char* name;
    uint8_t parent_block, child_block, frame, dictionary, every, references;
  };
  const Shape shapes[] = {{"child-based-auto", 8, 8, 0, 0, 2, 1},
                          {"child-based-one-frame", 16, 64, 140, 2, 5, 0},
                          {"child-based-frames", 4, 12, 165, 1, 3, 1},
                          {"child-based-parent-4096", 255, 64, 0, 0, 7, 0}};
  std::vector<Seed> out;
  for (const Shape& shape : shapes) {
    std::vector<uint8_t> s;
    auto u8 = [&](uint8_t v) { s.push_back(v); };
    // Writer options: block pages, level 3 (Range(0,16) - 7 = 3: 10), one thread, policy, dictionary off, no
    // coding byte, VMM, no UUID, empty machine type and creator, deterministic, no time, no file id, no key.
    for (uint8_t v : {uint8_t(shape.parent_block == 255 ? 255 : shape.parent_block - 1), uint8_t(10), uint8_t(0),
                      uint8_t(2), uint8_t(0), uint8_t(0), uint8_t(0), uint8_t(0), uint8_t(0), uint8_t(0), uint8_t(1),
                      uint8_t(0), uint8_t(0), uint8_t(0)}) {
      u8(v);
    }
    // One region "m" at 0, 4 KiB host pages, 48 pages.
    for (uint8_t v : {uint8_t(0), uint8_t(0), uint8_t('m' - 0x20), uint8_t(0), uint8_t(0), uint8_t(0), uint8_t(0),
                      uint8_t(0), uint8_t(47)}) {
      u8(v);
    }
    u8(48);  // operations: a pseudo-random page at each page
    for (uint8_t page = 0; page < 48; ++page) {
      for (uint8_t v : {uint8_t(0), uint8_t(0), uint8_t(0), page, uint8_t(1), uint8_t(4)}) u8(v);
      for (int i = 0; i < 8; ++i) u8(uint8_t(page * 37 + i * 11 + 1));
    }
    u8(1);  // the child phase
    for (uint8_t v : {uint8_t(shape.child_block - 1), uint8_t(0), uint8_t(1), shape.references, shape.frame,
                      shape.dictionary}) {
      u8(v);
    }
    for (uint8_t page = 0; page < 48; ++page) {
      const uint8_t kind = page % shape.every != 1 ? 0 : page % 11 == 1 ? 3 : page % 13 == 3 ? 4 : page % 17 == 5 ? 5 : 2;
      u8(kind);
      if (kind == 2) u8(uint8_t(page | 1));
      if (kind == 3) {
        for (uint8_t v : {uint8_t(4), uint8_t(page), uint8_t(7), uint8_t(9), uint8_t(11), uint8_t(13), uint8_t(15),
                          uint8_t(17), uint8_t(19)}) {
          u8(v);
        }
      }
    }
    out.push_back({shape.name, std::move(s)});
  }
  return out;
}

// Writes each distinct seed once (invalid vectors share most of their bytes with the valid ones).
bool WriteAll(const fs::path& dir, const std::vector<Seed>& seeds) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::set<std::vector<uint8_t>> written;
  for (const auto& s : seeds) {
    if (!written.insert(s.bytes).second) continue;
    std::ofstream f(dir / s.name, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(s.bytes.data()), std::streamsize(s.bytes.size()));
    if (!f) {
      std::fprintf(stderr, "hlt-fuzz-seeds: cannot write %s\n", (dir / s.name).c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: hlt-fuzz-seeds OUTDIR [VECTOR_DIR]\n");
    return 2;
  }
  fs::path out = argv[1];
  std::vector<Seed> checkpoints, vectors;
  // No ".hlt" extension: the repository ignores *.hlt outside the test vectors.
  const char* names[] = {"gen-tiny", "gen-blobs", "gen-multi-region", "gen-authenticated"};
  for (int v = 0; v < 4; ++v) {
    auto b = Build(v);
    if (!b) {
      std::fprintf(stderr, "hlt-fuzz-seeds: %s\n", b.error().ToString().c_str());
      return 1;
    }
    checkpoints.push_back({names[v], std::move(*b)});
  }
  if (argc == 3) {
    // The vectors themselves are read in place by the checkpoint target; only what is derived from them is
    // written here.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(argv[2], ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file() || it->path().extension() != ".hlt") continue;
      std::ifstream f(it->path(), std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      vectors.push_back({"vec-" + it->path().parent_path().filename().string() + "-" + it->path().stem().string(),
                         std::move(bytes)});
    }
    std::sort(vectors.begin(), vectors.end(), [](const Seed& a, const Seed& b) { return a.name < b.name; });
    // Chains (format-spec 12) for the checkpoint target: each child with the parents it asks for, in order.
    auto vector_bytes = [&](const std::string& name) {
      for (const auto& v : vectors) {
        if (v.name == "vec-chains-" + name) return v.bytes;
      }
      return std::vector<uint8_t>{};
    };
    const std::vector<std::vector<std::string>> chains = {
        {"chain-child", "chain-base"},
        {"chain-grandchild", "chain-child", "chain-base"},
        {"chain-past-parent", "chain-base"},
        {"cycle-a", "cycle-b", "cycle-a"},
        {"page-hashes-wrong", "chain-base"},
        // Format 1.4: blocks coded against the parent, read in block groups of up to three files.
        {"based-child", "based-base"},
        {"based-grandchild", "based-child", "based-base"},
        {"based-replaced", "based-child", "based-base"},
        {"based-base-page-zero", "based-base"},
    };
    for (const auto& names : chains) {
      std::vector<std::vector<uint8_t>> files;
      for (const auto& n : names) files.push_back(vector_bytes(n));
      if (std::any_of(files.begin(), files.end(), [](const auto& f) { return f.empty(); })) continue;
      checkpoints.push_back({"chain-" + names[0], halite::fuzzing::EncodeChainInput(files)});
    }
  }
  std::vector<Seed> header, footer, index, block;
  for (const auto* set : {&checkpoints, &vectors}) {
    for (const auto& s : *set) Derive(s, &header, &footer, &index, &block);
  }
  bool ok = WriteAll(out / "checkpoint_read_fuzz", checkpoints) && WriteAll(out / "header_decode_fuzz", header) &&
            WriteAll(out / "footer_decode_fuzz", footer) && WriteAll(out / "index_decode_fuzz", index) &&
            WriteAll(out / "block_decode_fuzz", block) && WriteAll(out / "hint_files_fuzz", HintSeeds()) &&
            WriteAll(out / "writer_roundtrip_fuzz", ProgramSeeds()) &&
            WriteAll(out / "writer_roundtrip_fuzz", ChildProgramSeeds());
  if (!ok) return 1;
  std::printf("hlt-fuzz-seeds: wrote seeds for 7 targets to %s\n", out.c_str());
  return 0;
}
