#include "halite/page_util.h"

#include "codec/hashing.h"

namespace halite {

bool IsAllZero(std::span<const uint8_t> bytes) { return codec::IsAllZero(bytes); }

}  // namespace halite
