// Small facts about page contents that every integration needs the same way.
#ifndef HALITE_PAGE_UTIL_H_
#define HALITE_PAGE_UTIL_H_

#include <cstdint>
#include <span>

#include "halite/export.h"

namespace halite {

// True when every byte of `bytes` is zero (a zero page is recorded, never stored: format-spec 5.3). Fast: the
// same word-wise scan the writer uses. Thread-safe.
HALITE_EXPORT bool IsAllZero(std::span<const uint8_t> bytes);

}  // namespace halite

#endif  // HALITE_PAGE_UTIL_H_
