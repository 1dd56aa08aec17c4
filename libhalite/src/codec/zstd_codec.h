// zstd compression of blocks and blobs. Contexts are not thread-safe: each worker thread owns its own.
#ifndef HALITE_CODEC_ZSTD_CODEC_H_
#define HALITE_CODEC_ZSTD_CODEC_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::codec {

// A zstd dictionary prepared for both directions; shared read-only between threads.
class Dictionary {
 public:
  // Fails (kCorrupt) when `bytes` is not a usable zstd dictionary.
  static Result<std::shared_ptr<const Dictionary>> Create(std::vector<uint8_t> bytes, int level);
  ~Dictionary();
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  const void* cdict() const { return cdict_; }
  const void* ddict() const { return ddict_; }

 private:
  Dictionary() = default;
  std::vector<uint8_t> bytes_;
  void* cdict_ = nullptr;
  void* ddict_ = nullptr;
};

// Trains a dictionary of at most `max_bytes` from equally sized samples laid end to end in `samples`.
// Returns an empty vector when training fails (too few or too uniform samples); that is not an error.
std::vector<uint8_t> TrainDictionary(std::span<const uint8_t> samples, size_t sample_size, size_t max_bytes);

class Compressor {
 public:
  Compressor();
  ~Compressor();
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
  // Compresses `in` as one frame that declares its content size; `dict` may be null. Appends to *out
  // (cleared first).
  Status Compress(std::span<const uint8_t> in, int level, const Dictionary* dict, std::vector<uint8_t>* out);

 private:
  void* cctx_;
};

class Decompressor {
 public:
  Decompressor();
  ~Decompressor();
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
  // Decompresses exactly one frame filling `out` exactly: the frame must declare content size out.size(),
  // have no trailing bytes, and (when `dict` is null) need no dictionary. Errors are kCorrupt with zstd's text.
  Status DecompressExact(std::span<const uint8_t> in, const Dictionary* dict, std::span<uint8_t> out);

 private:
  void* dctx_;
};

// The content size a zstd frame declares; kCorrupt when `frame` is not a frame or declares none. Lets a caller
// check a claimed size before allocating for it.
Result<uint64_t> FrameContentSize(std::span<const uint8_t> frame);

int MaxCompressionLevel();

}  // namespace halite::codec

#endif  // HALITE_CODEC_ZSTD_CODEC_H_
