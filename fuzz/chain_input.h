// The fuzz input for a chain of checkpoints (format-spec 12): "HLTCHAIN", u32le count (1..8), then count times
// u32le length + that many bytes. File 0 is opened; the parents a reader asks for are served from files 1, 2, ...
// in the order asked (whatever the path). Shared by checkpoint_read_fuzz and the seed writer.
#ifndef HALITE_FUZZ_CHAIN_INPUT_H_
#define HALITE_FUZZ_CHAIN_INPUT_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace halite::fuzzing {

inline constexpr char kChainMagic[8] = {'H', 'L', 'T', 'C', 'H', 'A', 'I', 'N'};
inline constexpr uint32_t kMaxChainFiles = 8;

inline std::vector<uint8_t> EncodeChainInput(const std::vector<std::vector<uint8_t>>& files) {
  std::vector<uint8_t> out(kChainMagic, kChainMagic + 8);
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(uint8_t(v >> (8 * i)));
  };
  u32(uint32_t(files.size()));
  for (const auto& f : files) {
    u32(uint32_t(f.size()));
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

// The files of a chain input, or nullopt when `data` is not one (then it is a single checkpoint).
inline std::optional<std::vector<std::vector<uint8_t>>> DecodeChainInput(const uint8_t* data, size_t size) {
  if (size < 12 || std::memcmp(data, kChainMagic, 8) != 0) return std::nullopt;
  auto u32 = [&](size_t at) {
    return uint32_t(data[at]) | uint32_t(data[at + 1]) << 8 | uint32_t(data[at + 2]) << 16 | uint32_t(data[at + 3]) << 24;
  };
  uint32_t count = u32(8);
  if (count < 1 || count > kMaxChainFiles) return std::nullopt;
  std::vector<std::vector<uint8_t>> files;
  size_t at = 12;
  for (uint32_t i = 0; i < count; ++i) {
    if (size - at < 4) return std::nullopt;
    uint32_t n = u32(at);
    at += 4;
    if (size - at < n) return std::nullopt;
    files.emplace_back(data + at, data + at + n);
    at += n;
  }
  return files;
}

}  // namespace halite::fuzzing

#endif  // HALITE_FUZZ_CHAIN_INPUT_H_
