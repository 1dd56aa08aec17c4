// Byte order and bounded reading: the one place the format codec, the QEMU and the Xen code load and store
// fixed-width integers and walk untrusted bytes.
//
// Loads and stores spell out each byte, so they are correct on any host and free of alignment traps.
// ByteWriter appends little-endian values; the Put* functions append to any byte container (std::string,
// std::vector<uint8_t>). ByteCursor reads from a span it borrows (the span must outlive it); every read is
// bounds-checked and every error names the offset. Not thread-safe; cheap to copy.
#ifndef HALITE_BYTES_H_
#define HALITE_BYTES_H_

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halite/status.h"

namespace halite {

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

// Appenders for any container of bytes (std::string, std::vector<uint8_t>): PutBe32(&record, v).
template <typename Bytes>
void PutU8(Bytes* out, uint8_t v) {
  out->push_back(static_cast<typename Bytes::value_type>(v));
}
template <typename Bytes, typename T, void (*Store)(uint8_t*, T)>
void PutStored(Bytes* out, T v) {
  uint8_t b[sizeof(T)];
  Store(b, v);
  out->insert(out->end(), b, b + sizeof(T));
}
template <typename Bytes> void PutLe16(Bytes* out, uint16_t v) { PutStored<Bytes, uint16_t, StoreLe16>(out, v); }
template <typename Bytes> void PutLe32(Bytes* out, uint32_t v) { PutStored<Bytes, uint32_t, StoreLe32>(out, v); }
template <typename Bytes> void PutLe64(Bytes* out, uint64_t v) { PutStored<Bytes, uint64_t, StoreLe64>(out, v); }
template <typename Bytes> void PutBe16(Bytes* out, uint16_t v) { PutStored<Bytes, uint16_t, StoreBe16>(out, v); }
template <typename Bytes> void PutBe32(Bytes* out, uint32_t v) { PutStored<Bytes, uint32_t, StoreBe32>(out, v); }
template <typename Bytes> void PutBe64(Bytes* out, uint64_t v) { PutStored<Bytes, uint64_t, StoreBe64>(out, v); }

// Appends little-endian values to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(v); }
  void U16(uint16_t v) { PutLe16(out_, v); }
  void U32(uint32_t v) { PutLe32(out_, v); }
  void U64(uint64_t v) { PutLe64(out_, v); }
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
  std::vector<uint8_t>* out_;
};

// Reads from untrusted bytes. Two ways to use it:
//  - unchecked-then-check: U8..U64, Be16..Be64, Bytes, Str return zero (or empty) once a read would pass the end,
//    and ok() turns false for good, so a decoder checks ok() once per structure and words its own error;
//  - checked: Read* return a Result whose error is corrupt and says where and what:
//    "<name>: offset 0x1c: libxc record type: needs 4 bytes, 2 left".
// base_offset is the offset of data[0] in whatever it came from (a file, a blob), used in every offset reported.
class ByteCursor {
 public:
  ByteCursor(std::span<const uint8_t> data, uint64_t base_offset, std::string_view name = {})
      : data_(data), base_(base_offset), name_(name) {}
  ByteCursor(std::string_view data, uint64_t base_offset, std::string_view name = {})
      : ByteCursor(std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()), base_offset, name) {}

  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return ok_ ? data_.size() - pos_ : 0; }
  uint64_t file_offset() const { return base_ + pos_; }
  bool Has(size_t n) const { return ok_ && data_.size() - pos_ >= n; }

  uint8_t U8() { return Take(1) ? data_[pos_ - 1] : 0; }
  uint16_t U16() { return Take(2) ? LoadLe16(&data_[pos_ - 2]) : 0; }
  uint32_t U32() { return Take(4) ? LoadLe32(&data_[pos_ - 4]) : 0; }
  uint64_t U64() { return Take(8) ? LoadLe64(&data_[pos_ - 8]) : 0; }
  uint16_t Be16() { return Take(2) ? LoadBe16(&data_[pos_ - 2]) : 0; }
  uint32_t Be32() { return Take(4) ? LoadBe32(&data_[pos_ - 4]) : 0; }
  uint64_t Be64() { return Take(8) ? LoadBe64(&data_[pos_ - 8]) : 0; }
  std::span<const uint8_t> Bytes(size_t n) {
    if (!Take(n)) return {};
    return data_.subspan(pos_ - n, n);
  }
  std::string Str(size_t n) {
    auto b = Bytes(n);
    return std::string(b.begin(), b.end());
  }

  // A corrupt Status at the current offset: "<name>: offset 0x..: <message>".
  Status Error(std::string_view message) const {
    char offset[32];
    std::snprintf(offset, sizeof offset, "offset 0x%llx: ", static_cast<unsigned long long>(file_offset()));
    std::string m = name_.empty() ? std::string() : std::string(name_) + ": ";
    return Status::Corrupt(m.append(offset).append(message));
  }
  // Ok when n more bytes are there, else the error the Read* functions return.
  Status Need(size_t n, std::string_view what) const {
    if (Has(n)) return Status::Ok();
    return Error(std::string(what) + ": needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) +
                 " left");
  }
  Result<uint8_t> ReadU8(std::string_view what) { return Checked(1, what, &ByteCursor::U8); }
  Result<uint16_t> ReadLe16(std::string_view what) { return Checked(2, what, &ByteCursor::U16); }
  Result<uint32_t> ReadLe32(std::string_view what) { return Checked(4, what, &ByteCursor::U32); }
  Result<uint64_t> ReadLe64(std::string_view what) { return Checked(8, what, &ByteCursor::U64); }
  Result<uint16_t> ReadBe16(std::string_view what) { return Checked(2, what, &ByteCursor::Be16); }
  Result<uint32_t> ReadBe32(std::string_view what) { return Checked(4, what, &ByteCursor::Be32); }
  Result<uint64_t> ReadBe64(std::string_view what) { return Checked(8, what, &ByteCursor::Be64); }
  Result<std::span<const uint8_t>> ReadBytes(size_t n, std::string_view what) {
    HLT_RETURN_IF_ERROR(Need(n, what));
    return Bytes(n);
  }
  // A little-endian u32 count of items that take at least min_item_size bytes each: refused when the bytes left
  // cannot hold that many, so a caller may size a container by it.
  Result<uint32_t> ReadLe32Count(std::string_view what, size_t min_item_size) {
    HLT_ASSIGN_OR_RETURN(uint32_t n, ReadLe32(what));
    if (uint64_t{n} * min_item_size > remaining()) {
      return Error(std::string(what) + ": " + std::to_string(n) + " items cannot fit in the " +
                   std::to_string(remaining()) + " bytes left");
    }
    return n;
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
  template <typename T>
  Result<T> Checked(size_t n, std::string_view what, T (ByteCursor::*read)()) {
    HLT_RETURN_IF_ERROR(Need(n, what));
    return (this->*read)();
  }

  std::span<const uint8_t> data_;
  uint64_t base_;
  std::string_view name_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace halite

#endif  // HALITE_BYTES_H_
