// Object-store locations of checkpoints: s3://BUCKET/KEY and rados://POOL/NAME. Parsing only, no I/O.
#ifndef HALITE_OBJSTORE_OBJECT_URI_H_
#define HALITE_OBJSTORE_OBJECT_URI_H_

#include <string>
#include <string_view>

#include "halite/status.h"

namespace halite::objstore {

enum class Scheme { kS3, kRados };

struct ObjectUri {
  Scheme scheme = Scheme::kS3;
  std::string container;  // the bucket or the pool
  std::string key;        // the object key or the RADOS object name (without the scheme and container)
};

// True when `path` names an object (s3:// or rados://) rather than a local file.
bool HasObjectScheme(std::string_view path);

// Parses "s3://BUCKET/KEY" or "rados://POOL/NAME". Errors: kInvalidArgument naming the URI and what is missing.
Result<ObjectUri> ParseObjectUri(std::string_view uri);

}  // namespace halite::objstore

#endif  // HALITE_OBJSTORE_OBJECT_URI_H_
