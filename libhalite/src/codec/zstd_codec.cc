#include "codec/zstd_codec.h"

#define ZSTD_STATIC_LINKING_ONLY  // the buffer-less block-by-block decoder (exported by libzstd 1.5)
#define ZDICT_STATIC_LINKING_ONLY  // fastCover training with fixed parameters
#include <zdict.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <utility>

namespace halite::codec {
namespace {

std::string ZstdError(size_t code) { return ZSTD_getErrorName(code); }

}  // namespace

Result<std::shared_ptr<const Dictionary>> Dictionary::Create(std::vector<uint8_t> bytes, int level) {
  static std::atomic<uint64_t> next_serial{1};
  std::shared_ptr<Dictionary> d(new Dictionary());
  d->serial_ = next_serial.fetch_add(1, std::memory_order_relaxed);
  d->bytes_ = std::move(bytes);
  d->ddict_ = ZSTD_createDDict(d->bytes_.data(), d->bytes_.size());
  d->cdict_ = ZSTD_createCDict(d->bytes_.data(), d->bytes_.size(), level);
  if (!d->ddict_ || !d->cdict_) return Status::Corrupt("not a usable zstd dictionary");
  // A raw-content dictionary (no zstd dictionary header) is accepted by zstd; we require the header so a
  // random byte string is not silently taken as a dictionary.
  if (ZDICT_getDictID(d->bytes_.data(), d->bytes_.size()) == 0) {
    return Status::Corrupt("dictionary has no zstd dictionary header");
  }
  return std::shared_ptr<const Dictionary>(std::move(d));
}

Dictionary::~Dictionary() {
  ZSTD_freeCDict(static_cast<ZSTD_CDict*>(cdict_));
  ZSTD_freeDDict(static_cast<ZSTD_DDict*>(ddict_));
}

std::vector<uint8_t> TrainDictionary(std::span<const uint8_t> samples, size_t sample_size, size_t max_bytes) {
  if (sample_size == 0 || samples.size() < sample_size * 16) return {};
  size_t n = samples.size() / sample_size;
  std::vector<size_t> sizes(n, sample_size);
  std::vector<uint8_t> dict(max_bytes);
  // fastCover with fixed parameters (segments of k = 1024 bytes, d = 8): one pass over the samples, where
  // ZDICT_trainFromBuffer tries several k and d and keeps the best; on guest memory this found dictionaries as good
  // for a third of the time (bench/core/README.md). Deterministic: one thread.
  ZDICT_fastCover_params_t p{};
  p.k = 1024;
  p.d = 8;
  p.f = 20;
  p.accel = 1;
  p.nbThreads = 1;
  p.splitPoint = 1.0;  // every sample trains; none is held back to test parameters
  size_t r = ZDICT_trainFromBuffer_fastCover(dict.data(), dict.size(), samples.data(), sizes.data(), unsigned(n), p);
  if (ZDICT_isError(r)) return {};
  dict.resize(r);
  return dict;
}

std::vector<uint8_t> ShrinkDictionary(std::span<const uint8_t> dictionary, std::span<const uint8_t> samples,
                                      size_t sample_size, size_t max_bytes) {
  if (sample_size == 0 || samples.size() < sample_size * 16) return {};
  const size_t header = ZDICT_getDictHeaderSize(dictionary.data(), dictionary.size());
  if (ZDICT_isError(header) || header >= dictionary.size() || max_bytes <= header) return {};
  // The content keeps the share of max_bytes the trained dictionary gave it: its header is about as large here.
  const size_t content = std::min(dictionary.size() - header, max_bytes - header);
  if (content < ZDICT_CONTENTSIZE_MIN) return {};
  const size_t n = samples.size() / sample_size;
  std::vector<size_t> sizes(n, sample_size);
  // Room for new entropy tables larger than the old ones: finalizing then never cuts the content.
  std::vector<uint8_t> out(header + content + 16384);
  ZDICT_params_t p{};  // level 0: zstd's default (3), as training's own finalization uses
  size_t r = ZDICT_finalizeDictionary(out.data(), out.size(), dictionary.data() + dictionary.size() - content, content,
                                      samples.data(), sizes.data(), unsigned(n), p);
  if (ZDICT_isError(r)) return {};
  out.resize(r);
  return out;
}

Compressor::Compressor() : cctx_(ZSTD_createCCtx()) {}
Compressor::~Compressor() { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_)); }

Status Compressor::Compress(std::span<const uint8_t> in, int level, const FrameReference& ref,
                            std::vector<uint8_t>* out, size_t block_bytes) {
  auto* cctx = static_cast<ZSTD_CCtx*>(cctx_);
  if (!cctx) return Status::Internal("zstd: out of memory creating a compression context");
  if (!ref.prefix.empty()) {
    return CompressInBlocks(in, level, ref, out, std::max<size_t>(1, block_bytes ? block_bytes : in.size()));
  }
  if (block_bytes > 0 && in.size() > block_bytes) return CompressInBlocks(in, level, ref, out, block_bytes);
  out->resize(ZSTD_compressBound(in.size()));
  size_t r;
  if (ref.dictionary) {
    // The CDict was built at the writer's level; the frame declares its content size by default.
    r = ZSTD_compress_usingCDict(cctx, out->data(), out->size(), in.data(), in.size(),
                                 static_cast<const ZSTD_CDict*>(ref.dictionary->cdict()));
  } else {
    r = ZSTD_compressCCtx(cctx, out->data(), out->size(), in.data(), in.size(), level);
  }
  if (ZSTD_isError(r)) return Status::Internal("zstd compression failed: " + ZstdError(r));
  out->resize(r);
  return Status::Ok();
}

Status Compressor::CompressInBlocks(std::span<const uint8_t> in, int level, const FrameReference& ref,
                                    std::vector<uint8_t>* out, size_t block_bytes) {
  auto* cctx = static_cast<ZSTD_CCtx*>(cctx_);
  auto failed = [](size_t r) { return Status::Internal("zstd compression failed: " + ZstdError(r)); };
  if (ref.dictionary && !ref.prefix.empty()) return Status::InvalidArgument("zstd: a dictionary and a prefix at once");
  size_t r = ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  if (ZSTD_isError(r)) return failed(r);
  // The same frame parameters as the one-shot calls: content size declared, no checksum (the block checksum of
  // the format covers the payload), the dictionary's id when there is one. A prefix is raw content, for this frame
  // only; zstd sizes the window to reach back over it.
  r = ref.dictionary ? ZSTD_CCtx_refCDict(cctx, static_cast<const ZSTD_CDict*>(ref.dictionary->cdict()))
                     : ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (ZSTD_isError(r)) return failed(r);
  if (ref.dictionary) {
    // Search the dictionary's own tables instead of copying them into the context for every frame: above 16 KiB
    // of input zstd would copy them (768 KiB for a 1 MiB dictionary at level 3), which cost more than compressing
    // a 64 KiB frame. On the repeats corpus image: 28% less CPU for the same size within 0.002%
    // (bench/results/2026-11-28-save26/).
    r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_forceAttachDict, ZSTD_dictForceAttach);
    if (ZSTD_isError(r)) return failed(r);
  }
  if (!ref.prefix.empty()) {
    r = ZSTD_CCtx_refPrefix_advanced(cctx, ref.prefix.data(), ref.prefix.size(), ZSTD_dct_rawContent);
    if (ZSTD_isError(r)) return failed(r);
  }
  r = ZSTD_CCtx_setPledgedSrcSize(cctx, in.size());
  if (ZSTD_isError(r)) return failed(r);
  // A flush ends the current zstd block; each costs a block header (3 bytes) and its own entropy tables when
  // the previous ones do not fit.
  const size_t pieces = (in.size() + block_bytes - 1) / block_bytes;
  out->resize(ZSTD_compressBound(in.size()) + pieces * 8 + 64);
  ZSTD_outBuffer o{out->data(), out->size(), 0};
  for (size_t at = 0; at < in.size() || (at == 0 && in.empty()); at += block_bytes) {
    const size_t n = std::min(block_bytes, in.size() - at);
    const bool last = at + n == in.size();
    ZSTD_inBuffer i{in.data() + at, n, 0};
    do {
      r = ZSTD_compressStream2(cctx, &o, &i, last ? ZSTD_e_end : ZSTD_e_flush);
      if (ZSTD_isError(r)) return failed(r);
      if (r != 0 && o.pos == o.size) return Status::Internal("zstd compression: output bound exceeded");
    } while (r != 0 || i.pos < i.size);
    if (in.empty()) break;
  }
  out->resize(o.pos);
  return Status::Ok();
}

Status Compressor::CompressFrames(std::span<const uint8_t> in, int level, const FrameReference& ref,
                                  std::vector<uint8_t>* out, size_t frame_bytes, size_t block_bytes) {
  if (frame_bytes == 0) return Status::InvalidArgument("zstd: frames of 0 bytes");
  out->clear();
  std::vector<uint8_t> frame;
  for (size_t at = 0; at < in.size(); at += frame_bytes) {
    HLT_RETURN_IF_ERROR(Compress(in.subspan(at, std::min(frame_bytes, in.size() - at)), level, ref, &frame, block_bytes));
    out->insert(out->end(), frame.begin(), frame.end());
  }
  return Status::Ok();
}

Result<std::vector<FrameExtent>> SplitFrames(std::span<const uint8_t> payload, const Dictionary* dict,
                                             size_t content_size, size_t unit) {
  std::vector<FrameExtent> frames;
  frames.reserve(content_size / unit);  // the most there may be: one allocation, never more
  size_t content = 0;
  for (size_t at = 0; at < payload.size();) {
    // Named only when something is wrong: a fault splits every framed block it reads, and builds no string for it.
    auto which = [&] { return "frame " + std::to_string(frames.size()) + " (payload byte " + std::to_string(at) + ")"; };
    if (frames.size() == content_size / unit) return Status::Corrupt(which() + ": more frames than pages");
    const std::span<const uint8_t> rest = payload.subspan(at);
    const unsigned long long declared = ZSTD_getFrameContentSize(rest.data(), rest.size());
    if (declared == ZSTD_CONTENTSIZE_ERROR) return Status::Corrupt(which() + " is not a zstd frame");
    if (declared == ZSTD_CONTENTSIZE_UNKNOWN) return Status::Corrupt(which() + " does not declare its content size");
    if (declared == 0 || declared % unit != 0 || declared > content_size - content) {
      return Status::Corrupt(which() + " declares " + std::to_string(declared) + " bytes (expected a non-zero multiple of " +
                             std::to_string(unit) + ", at most the " + std::to_string(content_size - content) +
                             " bytes left of the block)");
    }
    const size_t size = ZSTD_findFrameCompressedSize(rest.data(), rest.size());
    if (ZSTD_isError(size)) return Status::Corrupt(which() + " is malformed: " + ZstdError(size));
    if (!dict && ZSTD_getDictID_fromFrame(rest.data(), rest.size()) != 0) {
      return Status::Corrupt(which() + " needs a dictionary but none applies");
    }
    frames.push_back({at, size, content, size_t(declared)});
    at += size;
    content += size_t(declared);
  }
  if (content != content_size) {
    return Status::Corrupt("frames hold " + std::to_string(content) + " bytes, expected " + std::to_string(content_size));
  }
  if (frames.size() < 2) return Status::Corrupt("a payload of independent frames holds " + std::to_string(frames.size()) +
                                                " frame (expected at least 2)");
  return frames;
}

namespace {

// A prefix as zstd's decoder takes it: a dictionary of raw content, by reference (nothing copied, no tables built),
// so that bytes beginning with a dictionary's magic number are still taken as content.
ZSTD_DDict* PrefixDDict(std::span<const uint8_t> prefix) {
  return ZSTD_createDDict_advanced(prefix.data(), prefix.size(), ZSTD_dlm_byRef, ZSTD_dct_rawContent,
                                   ZSTD_defaultCMem);
}

bool Overlap(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return !a.empty() && !b.empty() && a.data() < b.data() + b.size() && b.data() < a.data() + a.size();
}

}  // namespace

Decompressor::Decompressor() : dctx_(ZSTD_createDCtx()) {}
Decompressor::~Decompressor() {
  ZSTD_freeDDict(static_cast<ZSTD_DDict*>(window_ddict_));
  ZSTD_freeDDict(static_cast<ZSTD_DDict*>(prefix_ddict_));
  ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(dctx_));
}

Status Decompressor::CheckFrame(std::span<const uint8_t> in, const Dictionary* dict, size_t out_size) const {
  if (!dctx_) return Status::Internal("zstd: out of memory creating a decompression context");
  unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) return Status::Corrupt("payload is not a zstd frame");
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) return Status::Corrupt("zstd frame does not declare its content size");
  if (declared != out_size) {
    return Status::Corrupt("zstd frame declares " + std::to_string(declared) + " bytes, expected " +
                           std::to_string(out_size));
  }
  size_t frame = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(frame)) return Status::Corrupt("zstd frame is malformed: " + ZstdError(frame));
  if (frame != in.size()) return Status::Corrupt("bytes after the zstd frame");
  unsigned want_dict = ZSTD_getDictID_fromFrame(in.data(), in.size());
  if (!dict && want_dict != 0) return Status::Corrupt("zstd frame needs a dictionary but none applies");
  return Status::Ok();
}

Status Decompressor::PrepareWindow(const Dictionary& d, size_t content) {
  const size_t dict_bytes = d.bytes().size();
  if (window_serial_ == d.serial() && window_.size() >= dict_bytes + content) return Status::Ok();
  // A by-reference DDict points into window_: made again whenever window_ is filled or moves.
  ZSTD_freeDDict(static_cast<ZSTD_DDict*>(window_ddict_));
  window_ddict_ = nullptr;
  window_serial_ = 0;
  window_.resize(std::max(window_.size(), dict_bytes + content));
  std::memcpy(window_.data(), d.bytes().data(), dict_bytes);
  window_ddict_ = ZSTD_createDDict_advanced(window_.data(), dict_bytes, ZSTD_dlm_byRef, ZSTD_dct_fullDict,
                                            ZSTD_defaultCMem);
  if (!window_ddict_) return Status::Internal("zstd: out of memory for a dictionary window");
  window_dict_bytes_ = dict_bytes;
  window_serial_ = d.serial();
  return Status::Ok();
}

Status Decompressor::Begin(const FrameReference& ref) {
  auto* dctx = static_cast<ZSTD_DCtx*>(dctx_);
  ZSTD_freeDDict(static_cast<ZSTD_DDict*>(prefix_ddict_));
  prefix_ddict_ = nullptr;
  size_t r;
  if (!ref.prefix.empty()) {
    prefix_ddict_ = PrefixDDict(ref.prefix);
    if (!prefix_ddict_) return Status::Internal("zstd: out of memory for a prefix");
    r = ZSTD_decompressBegin_usingDDict(dctx, static_cast<const ZSTD_DDict*>(prefix_ddict_));
  } else if (ref.dictionary) {
    r = ZSTD_decompressBegin_usingDDict(dctx, static_cast<const ZSTD_DDict*>(window_ddict_));
  } else {
    r = ZSTD_decompressBegin(dctx);
  }
  if (ZSTD_isError(r)) return Status::Corrupt("zstd: " + ZstdError(r));
  return Status::Ok();
}

Status Decompressor::DecompressExact(std::span<const uint8_t> in, const FrameReference& ref, std::span<uint8_t> out) {
  HLT_RETURN_IF_ERROR(CheckFrame(in, ref.dictionary, out.size()));
  if (Overlap(ref.prefix, out)) return Status::InvalidArgument("zstd: the output overlaps the prefix");
  auto* dctx = static_cast<ZSTD_DCtx*>(dctx_);
  size_t r;
  if (!ref.prefix.empty()) {
    ZSTD_DDict* prefix = PrefixDDict(ref.prefix);
    if (!prefix) return Status::Internal("zstd: out of memory for a prefix");
    r = ZSTD_decompress_usingDDict(dctx, out.data(), out.size(), in.data(), in.size(), prefix);
    ZSTD_freeDDict(prefix);
  } else if (ref.dictionary) {
    HLT_RETURN_IF_ERROR(PrepareWindow(*ref.dictionary, out.size()));
    r = ZSTD_decompress_usingDDict(dctx, WindowOut(), out.size(), in.data(), in.size(),
                                   static_cast<const ZSTD_DDict*>(window_ddict_));
    // r > 0: an empty `out` has no data pointer to copy to (memcpy's arguments must not be null, even for 0 bytes).
    if (!ZSTD_isError(r) && r > 0) std::memcpy(out.data(), WindowOut(), std::min<size_t>(r, out.size()));
  } else {
    r = ZSTD_decompressDCtx(dctx, out.data(), out.size(), in.data(), in.size());
  }
  if (ZSTD_isError(r)) return Status::Corrupt("zstd: " + ZstdError(r));
  if (r != out.size()) return Status::Corrupt("zstd frame decompressed to " + std::to_string(r) + " bytes");
  return Status::Ok();
}

Status Decompressor::DecompressExact(std::span<const uint8_t> in, const FrameReference& ref, std::span<uint8_t> out,
                                     const Progress& progress) {
  HLT_RETURN_IF_ERROR(CheckFrame(in, ref.dictionary, out.size()));
  if (Overlap(ref.prefix, out)) return Status::InvalidArgument("zstd: the output overlaps the prefix");
  auto* dctx = static_cast<ZSTD_DCtx*>(dctx_);
  // zstd's buffer-less API: one step per frame header, block header and block, each decoded straight into `out`
  // (which stays in place, so later blocks can refer back into it); against a dictionary, into the window after
  // it, each block then copied to `out` before it is reported.
  const bool windowed = ref.prefix.empty() && ref.dictionary != nullptr;
  if (windowed) HLT_RETURN_IF_ERROR(PrepareWindow(*ref.dictionary, out.size()));
  HLT_RETURN_IF_ERROR(Begin(ref));
  uint8_t* const dst = windowed ? WindowOut() : out.data();
  size_t in_pos = 0, out_pos = 0;
  for (;;) {
    const size_t need = ZSTD_nextSrcSizeToDecompress(dctx);
    if (need == 0) break;  // the frame is complete
    if (need > in.size() - in_pos) return Status::Corrupt("zstd frame is truncated at byte " + std::to_string(in_pos));
    const size_t r = ZSTD_decompressContinue(dctx, dst + out_pos, out.size() - out_pos, in.data() + in_pos, need);
    if (ZSTD_isError(r)) {
      return Status::Corrupt("zstd: " + ZstdError(r) + " (frame byte " + std::to_string(in_pos) + ")");
    }
    if (windowed && r > 0) std::memcpy(out.data() + out_pos, dst + out_pos, r);
    in_pos += need;
    out_pos += r;
    if (r > 0 && out_pos < out.size()) HLT_RETURN_IF_ERROR(progress(out_pos));
  }
  if (out_pos != out.size()) return Status::Corrupt("zstd frame decompressed to " + std::to_string(out_pos) + " bytes");
  if (in_pos != in.size()) return Status::Corrupt("bytes after the zstd frame");
  return progress(out_pos);
}

Status Decompressor::DecompressFrames(std::span<const uint8_t> in, const FrameReference& ref, std::span<uint8_t> out,
                                      size_t first, const RangeProgress& progress) {
  HLT_ASSIGN_OR_RETURN(std::vector<FrameExtent> frames, SplitFrames(in, ref.dictionary, out.size(), 4096));
  size_t lead = 0;
  while (lead + 1 < frames.size() && frames[lead + 1].content_offset <= first) ++lead;
  auto decode = [&](const FrameExtent& f) -> Status {
    const auto frame_in = in.subspan(f.payload_offset, f.payload_size);
    const auto frame_out = out.subspan(f.content_offset, f.content_size);
    if (!progress) return DecompressExact(frame_in, ref, frame_out);
    // One reference captured, so that std::function keeps it in place (no allocation per frame of a fault).
    struct {
      size_t done = 0;  // of this frame
      const FrameExtent* frame;
      const RangeProgress* progress;
    } at{0, &f, &progress};
    return DecompressExact(frame_in, ref, frame_out, [&at](size_t ready) {
      const size_t begin = std::exchange(at.done, ready);
      return ready > begin ? (*at.progress)(at.frame->content_offset + begin, at.frame->content_offset + ready)
                           : Status::Ok();
    });
  };
  // From the lead frame onwards, then the frames before it: a guest that faulted on a page tends to go on to the
  // pages after it (a block keeps its pages in the order they were touched when saved).
  for (size_t k = 0; k < frames.size(); ++k) HLT_RETURN_IF_ERROR(decode(frames[(lead + k) % frames.size()]));
  return Status::Ok();
}

Result<uint64_t> FrameContentSize(std::span<const uint8_t> frame) {
  unsigned long long declared = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) return Status::Corrupt("payload is not a zstd frame");
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) return Status::Corrupt("zstd frame does not declare its content size");
  return uint64_t(declared);
}

int MaxCompressionLevel() { return ZSTD_maxCLevel(); }

}  // namespace halite::codec
