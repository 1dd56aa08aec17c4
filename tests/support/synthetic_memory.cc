#include "support/synthetic_memory.h"

#include <cstdio>
#include <cstring>

namespace halite::testing {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kLibraryPages = 512;

const char* const kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were", "their",
    "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who", "so",
    "memory", "page", "block", "kernel", "device", "driver", "request", "response", "server", "client", "error",
    "timeout", "connection", "session", "user", "process", "thread", "socket", "buffer", "cache", "disk", "file",
    "network", "interface", "address", "packet", "queue", "worker", "started", "stopped", "failed", "success"};
const char* const kSubsystems[] = {"eth0", "sda", "systemd", "kernel", "nginx", "redis", "postgres", "sshd", "cron"};

// x86-64 instruction fragments common in compiled code.
const std::vector<std::vector<uint8_t>> kInsns = {
    {0x55},                    {0x48, 0x89, 0xe5},       {0x41, 0x57},       {0x41, 0x56},       {0x53},
    {0x48, 0x83, 0xec, 0x28},  {0x48, 0x8b, 0x45, 0xf8}, {0x89, 0x45, 0xfc}, {0x31, 0xc0},       {0xc3},
    {0x5d},                    {0x48, 0x85, 0xc0},       {0x74, 0x00},       {0x75, 0x00},       {0x0f, 0x1f, 0x44, 0x00, 0x00},
    {0x48, 0x8d, 0x3d},        {0xe8},                   {0xe9},             {0x48, 0x89, 0xc7}, {0x66, 0x90},
    {0x48, 0x8b, 0x7d, 0xe8},  {0x8b, 0x45, 0xec},       {0x83, 0xf8, 0x01}, {0x0f, 0x84},       {0xff, 0x15}};

}  // namespace

SyntheticMemory::SyntheticMemory(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {
  library_.resize(kLibraryPages * kPage);
}

uint64_t SyntheticMemory::Next() {  // splitmix64: fast, deterministic, good enough
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

PageFlavor SyntheticMemory::PickFlavor() {
  uint64_t r = Below(100);
  if (r < 30) return PageFlavor::kZero;
  if (r < 44) return PageFlavor::kText;
  if (r < 58) return PageFlavor::kCode;
  if (r < 72) return PageFlavor::kPointers;
  if (r < 82) return PageFlavor::kSparse;
  if (r < 92) return PageFlavor::kDuplicate;
  return PageFlavor::kRandom;
}

void SyntheticMemory::Text(uint8_t* p) {
  size_t n = 0;
  char line[256];
  while (n < kPage) {
    int len;
    if (Below(3) == 0) {
      len = std::snprintf(line, sizeof line, "[%6llu.%06llu] %s: ", (unsigned long long)(line_no_ / 50),
                          (unsigned long long)Below(1000000), kSubsystems[Below(std::size(kSubsystems))]);
    } else {
      len = 0;
    }
    int words = 4 + int(Below(12));
    for (int w = 0; w < words && len < 200; ++w) {
      len += std::snprintf(line + len, sizeof line - size_t(len), "%s%s", w ? " " : "", kWords[Below(std::size(kWords))]);
    }
    if (Below(4) == 0) len += std::snprintf(line + len, sizeof line - size_t(len), " %llu", (unsigned long long)Below(65536));
    line[len++] = '\n';
    ++line_no_;
    size_t take = std::min(size_t(len), kPage - n);
    std::memcpy(p + n, line, take);
    n += take;
  }
}

void SyntheticMemory::Code(uint8_t* p) {
  size_t n = 0;
  while (n < kPage) {
    const auto& ins = kInsns[Below(kInsns.size())];
    for (uint8_t b : ins) {
      if (n < kPage) p[n++] = b;
    }
    if (ins.size() <= 2 && (ins[0] == 0xe8 || ins[0] == 0xe9 || ins[0] == 0x0f || ins[0] == 0xff)) {
      uint32_t rel = uint32_t(Below(1 << 20)) - (1 << 19);  // near call/jump targets
      for (int i = 0; i < 4 && n < kPage; ++i) p[n++] = uint8_t(rel >> (8 * i));
    }
  }
}

void SyntheticMemory::Pointers(uint8_t* p) {
  uint64_t kernel_base = 0xffff888000000000ull + (Below(1 << 16) << 20);
  uint64_t user_base = 0x00007f0000000000ull + (Below(1 << 16) << 24);
  for (size_t i = 0; i < kPage; i += 8) {
    uint64_t v;
    switch (Below(6)) {
      case 0: case 1: v = kernel_base + (Below(1 << 20) & ~uint64_t(63)); break;
      case 2: v = user_base + (Below(1 << 22) & ~uint64_t(15)); break;
      case 3: v = Below(4096); break;
      case 4: v = 0; break;
      default: v = Below(2) ? 0xdead4ead00000000ull | Below(256) : uint64_t(-1); break;
    }
    std::memcpy(p + i, &v, 8);
  }
}

void SyntheticMemory::Sparse(uint8_t* p) {
  std::memset(p, 0, kPage);
  size_t stride = size_t(32) << Below(3);  // struct size 32, 64 or 128
  for (size_t i = 0; i < kPage; i += stride) {
    uint64_t id = Below(1 << 16), flags = Below(16), ptr = 0xffff888000000000ull + (Below(1 << 24) << 6);
    std::memcpy(p + i, &id, 8);
    std::memcpy(p + i + 8, &flags, 4);
    if (Below(2)) std::memcpy(p + i + 16, &ptr, 8);
  }
}

void SyntheticMemory::Random(uint8_t* p) {
  for (size_t i = 0; i < kPage; i += 8) {
    uint64_t v = Next();
    std::memcpy(p + i, &v, 8);
  }
}

void SyntheticMemory::MakePage(PageFlavor flavor, uint8_t* p) {
  switch (flavor) {
    case PageFlavor::kZero: std::memset(p, 0, kPage); return;
    case PageFlavor::kText: Text(p); break;
    case PageFlavor::kCode: Code(p); break;
    case PageFlavor::kPointers: Pointers(p); break;
    case PageFlavor::kSparse: Sparse(p); break;
    case PageFlavor::kRandom: Random(p); break;
    case PageFlavor::kDuplicate:
      if (library_pages_ == 0) {
        Code(p);
        break;
      }
      std::memcpy(p, library_.data() + Below(std::min(library_pages_, kLibraryPages)) * kPage, kPage);
      return;
  }
  // Remember some pages so later duplicates have something to copy (shared libraries, page cache).
  if (Below(8) == 0) {
    std::memcpy(library_.data() + (library_pages_ % kLibraryPages) * kPage, p, kPage);
    ++library_pages_;
  }
}

void SyntheticMemory::Fill(std::span<uint8_t> out) {
  for (size_t off = 0; off + kPage <= out.size(); off += kPage) {
    if (run_left_ == 0) {
      run_flavor_ = PickFlavor();
      run_left_ = 1 + Below(64);
    }
    --run_left_;
    MakePage(run_flavor_, out.data() + off);
  }
}

std::vector<uint8_t> SyntheticBytes(uint64_t bytes, uint64_t seed) {
  std::vector<uint8_t> v(bytes);
  SyntheticMemory(seed).Fill(v);
  return v;
}

Status WriteSyntheticImage(const std::string& path, uint64_t bytes, uint64_t seed) {
  if (bytes % kPage != 0) return Status::InvalidArgument("image size must be a multiple of 4096");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::IoError(path + ": cannot create", errno);
  SyntheticMemory mem(seed);
  std::vector<uint8_t> chunk(1 << 20);
  for (uint64_t done = 0; done < bytes; done += chunk.size()) {
    size_t n = size_t(std::min<uint64_t>(chunk.size(), bytes - done));
    mem.Fill(std::span(chunk.data(), n));
    if (std::fwrite(chunk.data(), 1, n, f) != n) {
      std::fclose(f);
      return Status::IoError(path + ": write failed", errno);
    }
  }
  if (std::fclose(f) != 0) return Status::IoError(path + ": close failed", errno);
  return Status::Ok();
}

}  // namespace halite::testing
