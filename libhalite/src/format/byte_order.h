// Little-endian loads and stores, and a bounds-checked cursor over untrusted bytes.
// Everything the format codec decodes goes through ByteCursor, so no decoder can read past its input.
#ifndef HALITE_FORMAT_BYTE_ORDER_H_
#define HALITE_FORMAT_BYTE_ORDER_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace halite::format {

inline uint16_t LoadLe16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t LoadLe32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline uint64_t LoadLe64(const uint8_t* p) { return uint64_t(LoadLe32(p)) | (uint64_t(LoadLe32(p + 4)) << 32); }
inline void StoreLe16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void StoreLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}

// Appends little-endian values to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(v); }
  void U16(uint16_t v) { Grow(2, [&](uint8_t* p) { StoreLe16(p, v); }); }
  void U32(uint32_t v) { Grow(4, [&](uint8_t* p) { StoreLe32(p, v); }); }
  void U64(uint64_t v) { Grow(8, [&](uint8_t* p) { StoreLe64(p, v); }); }
  void Bytes(const void* data, size_t n) {
    const auto* b = static_cast<const uint8_t*>(data);
    out_->insert(out_->end(), b, b + n);
  }
  void Str(std::string_view s) { Bytes(s.data(), s.size()); }
  void Zeros(size_t n) { out_->insert(out_->end(), n, 0); }
  // Zero padding up to a multiple of `align` measured from `start`.
  void PadTo(size_t start, size_t align) {
    size_t len = out_->size() - start;
    Zeros((align - len % align) % align);
  }
  size_t size() const { return out_->size(); }

 private:
  template <typename F>
  void Grow(size_t n, F store) {
    size_t at = out_->size();
    out_->resize(at + n);
    store(out_->data() + at);
  }
  std::vector<uint8_t>* out_;
};

// Reads little-endian values from untrusted bytes. Every read is bounds-checked; after the first failed read
// ok() is false and all further reads return zero, so a decoder checks ok() once per structure.
// base_offset is the file offset of data[0], used in error messages.
class ByteCursor {
 public:
  ByteCursor(std::span<const uint8_t> data, uint64_t base_offset) : data_(data), base_(base_offset) {}
  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return ok_ ? data_.size() - pos_ : 0; }
  uint64_t file_offset() const { return base_ + pos_; }
  bool Has(size_t n) const { return ok_ && data_.size() - pos_ >= n; }

  uint8_t U8() { return Take(1) ? data_[pos_ - 1] : 0; }
  uint16_t U16() { return Take(2) ? LoadLe16(&data_[pos_ - 2]) : 0; }
  uint32_t U32() { return Take(4) ? LoadLe32(&data_[pos_ - 4]) : 0; }
  uint64_t U64() { return Take(8) ? LoadLe64(&data_[pos_ - 8]) : 0; }
  std::span<const uint8_t> Bytes(size_t n) {
    if (!Take(n)) return {};
    return data_.subspan(pos_ - n, n);
  }
  std::string Str(size_t n) {
    auto b = Bytes(n);
    return std::string(b.begin(), b.end());
  }

 private:
  bool Take(size_t n) {
    if (!ok_ || data_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> data_;
  uint64_t base_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace halite::format

#endif  // HALITE_FORMAT_BYTE_ORDER_H_
