// Fixed-endian loads and stores (internal). The streams mix big-endian headers with little-endian records;
// spelling out each byte keeps the codec correct on any host and free of alignment traps.
#ifndef HALITE_XEN_SRC_XEN_ENDIAN_H_
#define HALITE_XEN_SRC_XEN_ENDIAN_H_

#include <cstdint>
#include <vector>

namespace halite::xen::internal {

inline uint16_t LoadLe16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t LoadLe32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
inline uint64_t LoadLe64(const uint8_t* p) { return uint64_t{LoadLe32(p)} | (uint64_t{LoadLe32(p + 4)} << 32); }
inline uint16_t LoadBe16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
inline uint32_t LoadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
inline uint64_t LoadBe64(const uint8_t* p) { return (uint64_t{LoadBe32(p)} << 32) | LoadBe32(p + 4); }

inline void StoreLe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void StoreLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void StoreBe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
inline void StoreBe64(uint8_t* p, uint64_t v) {
  StoreBe32(p, static_cast<uint32_t>(v >> 32));
  StoreBe32(p + 4, static_cast<uint32_t>(v));
}

// Appending forms for building small buffers.
inline void PutLe32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  StoreLe32(b, v);
  out.insert(out.end(), b, b + 4);
}
inline void PutLe64(std::vector<uint8_t>& out, uint64_t v) {
  uint8_t b[8];
  StoreLe64(b, v);
  out.insert(out.end(), b, b + 8);
}

// Bytes of zero padding after a body of `length` bytes so the record ends on an 8-byte boundary.
inline uint32_t PaddingFor(uint64_t length) { return static_cast<uint32_t>((8 - (length & 7)) & 7); }

}  // namespace halite::xen::internal

#endif  // HALITE_XEN_SRC_XEN_ENDIAN_H_
