#include "codec/zstd_codec.h"

#include <zdict.h>
#include <zstd.h>

#include <string>

namespace halite::codec {
namespace {

std::string ZstdError(size_t code) { return ZSTD_getErrorName(code); }

}  // namespace

Result<std::shared_ptr<const Dictionary>> Dictionary::Create(std::vector<uint8_t> bytes, int level) {
  std::shared_ptr<Dictionary> d(new Dictionary());
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
  size_t r = ZDICT_trainFromBuffer(dict.data(), dict.size(), samples.data(), sizes.data(), unsigned(n));
  if (ZDICT_isError(r)) return {};
  dict.resize(r);
  return dict;
}

Compressor::Compressor() : cctx_(ZSTD_createCCtx()) {}
Compressor::~Compressor() { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_)); }

Status Compressor::Compress(std::span<const uint8_t> in, int level, const Dictionary* dict,
                            std::vector<uint8_t>* out) {
  auto* cctx = static_cast<ZSTD_CCtx*>(cctx_);
  if (!cctx) return Status::Internal("zstd: out of memory creating a compression context");
  out->resize(ZSTD_compressBound(in.size()));
  size_t r;
  if (dict) {
    // The CDict was built at the writer's level; the frame declares its content size by default.
    r = ZSTD_compress_usingCDict(cctx, out->data(), out->size(), in.data(), in.size(),
                                 static_cast<const ZSTD_CDict*>(dict->cdict()));
  } else {
    r = ZSTD_compressCCtx(cctx, out->data(), out->size(), in.data(), in.size(), level);
  }
  if (ZSTD_isError(r)) return Status::Internal("zstd compression failed: " + ZstdError(r));
  out->resize(r);
  return Status::Ok();
}

Decompressor::Decompressor() : dctx_(ZSTD_createDCtx()) {}
Decompressor::~Decompressor() { ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(dctx_)); }

Status Decompressor::DecompressExact(std::span<const uint8_t> in, const Dictionary* dict, std::span<uint8_t> out) {
  auto* dctx = static_cast<ZSTD_DCtx*>(dctx_);
  if (!dctx) return Status::Internal("zstd: out of memory creating a decompression context");
  unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) return Status::Corrupt("payload is not a zstd frame");
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) return Status::Corrupt("zstd frame does not declare its content size");
  if (declared != out.size()) {
    return Status::Corrupt("zstd frame declares " + std::to_string(declared) + " bytes, expected " +
                           std::to_string(out.size()));
  }
  size_t frame = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(frame)) return Status::Corrupt("zstd frame is malformed: " + ZstdError(frame));
  if (frame != in.size()) return Status::Corrupt("bytes after the zstd frame");
  unsigned want_dict = ZSTD_getDictID_fromFrame(in.data(), in.size());
  if (!dict && want_dict != 0) return Status::Corrupt("zstd frame needs a dictionary but none applies");
  size_t r;
  if (dict) {
    r = ZSTD_decompress_usingDDict(dctx, out.data(), out.size(), in.data(), in.size(),
                                   static_cast<const ZSTD_DDict*>(dict->ddict()));
  } else {
    r = ZSTD_decompressDCtx(dctx, out.data(), out.size(), in.data(), in.size());
  }
  if (ZSTD_isError(r)) return Status::Corrupt("zstd: " + ZstdError(r));
  if (r != out.size()) return Status::Corrupt("zstd frame decompressed to " + std::to_string(r) + " bytes");
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
