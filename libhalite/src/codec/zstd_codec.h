// zstd compression of blocks and blobs. Contexts are not thread-safe: each worker thread owns its own.
#ifndef HALITE_CODEC_ZSTD_CODEC_H_
#define HALITE_CODEC_ZSTD_CODEC_H_

#include <cstdint>
#include <functional>
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
  // Unique to this dictionary in the process (never reused, unlike an address): what a decoder's copy is keyed by.
  uint64_t serial() const { return serial_; }

 private:
  Dictionary() = default;
  uint64_t serial_ = 0;
  std::vector<uint8_t> bytes_;
  void* cdict_ = nullptr;
  void* ddict_ = nullptr;
};

// What a frame is compressed against, and must be decoded against: nothing, the file's dictionary (format-spec 5.7),
// or raw content (a BASED block's base, 5.4: zstd's "prefix", ZSTD_CCtx_refPrefix). Never both. The prefix is used
// as raw content whatever its first bytes are (guest memory may begin with a dictionary's magic number). Borrowed:
// what it points to must outlive the call it is given to.
struct FrameReference {
  FrameReference() = default;
  FrameReference(const Dictionary* d) : dictionary(d) {}  // NOLINT: a dictionary (or null) is a reference
  static FrameReference Prefix(std::span<const uint8_t> bytes) {
    FrameReference r;
    r.prefix = bytes;
    return r;
  }
  const Dictionary* dictionary = nullptr;
  std::span<const uint8_t> prefix;
};

// Trains a dictionary of at most `max_bytes` from equally sized samples laid end to end in `samples`.
// Returns an empty vector when training fails (too few or too uniform samples); that is not an error.
std::vector<uint8_t> TrainDictionary(std::span<const uint8_t> samples, size_t sample_size, size_t max_bytes);
// A smaller dictionary made from a trained one without training again: the last `max_bytes` of its content (where
// fastCover puts the segments it chose first, the most useful ones), with entropy tables computed anew from the
// samples (ZDICT_finalizeDictionary). Returns an empty vector when `dictionary` has no zstd header or finalizing
// fails; that is not an error.
std::vector<uint8_t> ShrinkDictionary(std::span<const uint8_t> dictionary, std::span<const uint8_t> samples,
                                      size_t sample_size, size_t max_bytes);

class Compressor {
 public:
  Compressor();
  ~Compressor();
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
  // Compresses `in` as one frame that declares its content size, against `ref` (nothing, a dictionary or a
  // prefix). Appends to *out (cleared first). With `block_bytes` > 0 the frame's zstd blocks end every
  // `block_bytes` of input (the match history still spans the whole frame), so a reader can decode it a piece at a
  // time (Decompressor::DecompressExact with a progress callback); 0 leaves the cut to zstd (128 KiB blocks).
  Status Compress(std::span<const uint8_t> in, int level, const FrameReference& ref, std::vector<uint8_t>* out,
                  size_t block_bytes = 0);
  // Compresses `in` as independent frames of `frame_bytes` of input each (the last may be shorter), one after
  // another in *out (cleared first), each as Compress with `block_bytes` would: a reader can decode any frame
  // without the ones before it (format-spec 5.4, FRAMED). `frame_bytes` > 0.
  Status CompressFrames(std::span<const uint8_t> in, int level, const FrameReference& ref, std::vector<uint8_t>* out,
                        size_t frame_bytes, size_t block_bytes);

 private:
  Status CompressInBlocks(std::span<const uint8_t> in, int level, const FrameReference& ref, std::vector<uint8_t>* out,
                          size_t block_bytes);
  void* cctx_;
};

// One frame of a payload made of independent frames (format-spec 5.4, FRAMED): where it lies in the payload and
// which bytes of the block's raw content it holds.
struct FrameExtent {
  size_t payload_offset = 0, payload_size = 0;
  size_t content_offset = 0, content_size = 0;
};

// The frames of a FRAMED payload, checked before anything is decoded: at least two; each a zstd frame that declares
// its content size, a non-zero multiple of `unit`; no dictionary named unless `dict` (then the rule of
// DecompressExact); no bytes after the last; contents adding up to exactly `content_size`. kCorrupt naming the
// frame otherwise. At most content_size / unit frames, so a hostile payload cannot make this allocate more. (A frame
// compressed against a prefix names no dictionary: `dict` is null for those.)
Result<std::vector<FrameExtent>> SplitFrames(std::span<const uint8_t> payload, const Dictionary* dict,
                                             size_t content_size, size_t unit);

class Decompressor {
 public:
  Decompressor();
  ~Decompressor();
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
  // Decompresses exactly one frame filling `out` exactly: the frame must declare content size out.size(),
  // have no trailing bytes, and (without a dictionary in `ref`) name no dictionary. It is decoded against `ref`
  // (a frame compressed against a prefix is decoded with the same prefix; with another, it decodes to other bytes
  // or fails). `out` must not overlap the prefix. Errors are kCorrupt with zstd's text.
  Status DecompressExact(std::span<const uint8_t> in, const FrameReference& ref, std::span<uint8_t> out);
  // Called after each zstd block is decoded with the number of leading bytes of `out` that now hold their final
  // content (non-decreasing; the last call has out.size()). A non-ok return stops decoding and is returned.
  using Progress = std::function<Status(size_t ready)>;
  // The same checks as DecompressExact (all of them on the frame header and block structure before decoding
  // a byte), then decodes block after block straight into `out`, calling `progress` after each one, so the
  // caller can use the beginning of `out` while the rest is still being decoded. A block that fails to decode
  // leaves the bytes before it decoded: the caller decides what the ones it already used are worth.
  Status DecompressExact(std::span<const uint8_t> in, const FrameReference& ref, std::span<uint8_t> out,
                         const Progress& progress);
  // Called with a range [begin, end) of `out` whose bytes now hold their final content; ranges never overlap and
  // together cover `out`. A non-ok return stops decoding and is returned.
  using RangeProgress = std::function<Status(size_t begin, size_t end)>;
  // Decodes a payload of independent frames (SplitFrames' checks first, on all of them): the frame holding byte
  // `first` of `out` first, then the others in order, each piece by piece when `progress` is set (ranges in
  // zstd-block steps). So the frame a fault needs is decoded before any other.
  Status DecompressFrames(std::span<const uint8_t> in, const FrameReference& ref, std::span<uint8_t> out,
                          size_t first, const RangeProgress& progress);

 private:
  // The checks both decoders make before decoding a byte.
  Status CheckFrame(std::span<const uint8_t> in, const Dictionary* dict, size_t out_size) const;
  // Starts a frame of the buffer-less decoder against `ref`.
  Status Begin(const FrameReference& ref);
  // A frame against a dictionary is decoded into window_, right after a copy of the dictionary's bytes, then copied
  // out: zstd then takes the dictionary's content as the frame's own history, and copies a match from it in line,
  // instead of calling memmove for each match that lies in a separate dictionary (bench/results/2026-11-28-fault28:
  // those calls were 30-34% of a block read's time). Readies window_ for `d` and `content` bytes of output.
  Status PrepareWindow(const Dictionary& d, size_t content);
  uint8_t* WindowOut() { return window_.data() + window_dict_bytes_; }
  void* dctx_;
  void* prefix_ddict_ = nullptr;  // the current prefix as a raw-content, by-reference DDict (Begin)
  std::vector<uint8_t> window_;   // a dictionary's bytes, then room for one frame's content
  size_t window_dict_bytes_ = 0;
  uint64_t window_serial_ = 0;     // the dictionary window_ holds (0: none)
  void* window_ddict_ = nullptr;   // a DDict of window_'s dictionary bytes, by reference
};

// The content size a zstd frame declares; kCorrupt when `frame` is not a frame or declares none. Lets a caller
// check a claimed size before allocating for it.
Result<uint64_t> FrameContentSize(std::span<const uint8_t> frame);

int MaxCompressionLevel();

}  // namespace halite::codec

#endif  // HALITE_CODEC_ZSTD_CODEC_H_
