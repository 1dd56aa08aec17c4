#include "objstore/object_uri.h"

#include <fmt/format.h>

namespace halite::objstore {

namespace {
constexpr std::string_view kS3Prefix = "s3://";
constexpr std::string_view kRadosPrefix = "rados://";
}  // namespace

bool HasObjectScheme(std::string_view path) { return path.starts_with(kS3Prefix) || path.starts_with(kRadosPrefix); }

Result<ObjectUri> ParseObjectUri(std::string_view uri) {
  ObjectUri out;
  std::string_view rest;
  if (uri.starts_with(kS3Prefix)) {
    out.scheme = Scheme::kS3;
    rest = uri.substr(kS3Prefix.size());
  } else if (uri.starts_with(kRadosPrefix)) {
    out.scheme = Scheme::kRados;
    rest = uri.substr(kRadosPrefix.size());
  } else {
    return Status::InvalidArgument(fmt::format("{}: not an object URI (expected s3://BUCKET/KEY or rados://POOL/NAME)", uri));
  }
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == rest.size()) {
    return Status::InvalidArgument(fmt::format("{}: expected {}/{} after the scheme", uri,
                                               out.scheme == Scheme::kS3 ? "BUCKET" : "POOL",
                                               out.scheme == Scheme::kS3 ? "KEY" : "NAME"));
  }
  out.container = std::string(rest.substr(0, slash));
  out.key = std::string(rest.substr(slash + 1));
  for (unsigned char c : out.container + out.key) {
    if (c < 0x20 || c == 0x7f) return Status::InvalidArgument(fmt::format("{}: control character in the URI", uri));
  }
  return out;
}

}  // namespace halite::objstore
