// The fuzz input for a chain of checkpoints (format-spec 12): "HLTCHAIN", u32le count (1..8), then count times
// u32le length + that many bytes. File 0 is opened; the parents a reader asks for are served from files 1, 2, ...
// in the order asked (whatever the path). Shared by checkpoint_read_fuzz and the seed writer.
#ifndef HALITE_FUZZ_CHAIN_INPUT_H_
#define HALITE_FUZZ_CHAIN_INPUT_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "halite/bytes.h"

namespace halite::fuzzing {

inline constexpr char kChainMagic[8] = {'H', 'L', 'T', 'C', 'H', 'A', 'I', 'N'};
inline constexpr uint32_t kMaxChainFiles = 8;

inline std::vector<uint8_t> EncodeChainInput(const std::vector<std::vector<uint8_t>>& files) {
  std::vector<uint8_t> out(kChainMagic, kChainMagic + 8);
  PutLe32(&out, uint32_t(files.size()));
  for (const auto& f : files) {
    PutLe32(&out, uint32_t(f.size()));
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

// The files of a chain input, or nullopt when `data` is not one (then it is a single checkpoint).
inline std::optional<std::vector<std::vector<uint8_t>>> DecodeChainInput(const uint8_t* data, size_t size) {
  if (size < 12 || std::memcmp(data, kChainMagic, 8) != 0) return std::nullopt;
  ByteCursor in(std::span<const uint8_t>(data + 8, size - 8), 8);
  const uint32_t count = in.U32();
  if (count < 1 || count > kMaxChainFiles) return std::nullopt;
  std::vector<std::vector<uint8_t>> files;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t n = in.U32();
    const std::span<const uint8_t> file = in.Bytes(n);
    if (!in.ok()) return std::nullopt;
    files.emplace_back(file.begin(), file.end());
  }
  return files;
}

}  // namespace halite::fuzzing

#endif  // HALITE_FUZZ_CHAIN_INPUT_H_
