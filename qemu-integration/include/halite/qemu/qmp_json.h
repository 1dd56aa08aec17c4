// JSON for QMP and for QEMU's VM description (VMDESC), with nlohmann::json as the value type.
//
// nlohmann throws on malformed text, on a get<>() of the wrong type and on dumping a string that is not UTF-8;
// the library does not throw, so everything that could goes through these helpers: parsing returns a
// Result, lookups return nullptr or a neutral value, serializing replaces invalid UTF-8.
// Thread-compatible: a const Json may be read from many threads.
#ifndef HALITE_QEMU_QMP_JSON_H_
#define HALITE_QEMU_QMP_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "halite/status.h"

namespace halite::qemu {

using Json = nlohmann::json;

// Parses exactly one value (surrounding whitespace allowed). Errors are corrupt and name `what` and the byte
// offset: "qmp: offset 0x12: syntax error while parsing object separator - ...; expected ':'". Nesting deeper
// than 256 levels is refused (the text is untrusted when it comes from a checkpoint).
Result<Json> ParseJson(std::string_view text, std::string_view what = "json");

// Compact text (no newlines: one QMP message per line). Invalid UTF-8 in a string becomes U+FFFD.
std::string JsonText(const Json& value);

// Member `key` of an object: nullptr when absent or when `value` is not an object.
const Json* FindMember(const Json& value, std::string_view key);
// The value as that type, or a neutral value ("", 0, false) when it holds another type.
const std::string& AsString(const Json& value);
int64_t AsInt(const Json& value);  // a floating-point number is truncated (and saturated)
bool AsBool(const Json& value);

// Splits a byte stream into complete top-level JSON objects or arrays (QMP sends one object per line, but a
// reader must not rely on reads ending at line boundaries). Feed bytes, then call Next until it returns false.
class JsonFramer {
 public:
  void Feed(std::string_view bytes) { buf_.append(bytes); }
  // Moves the next complete top-level value's text into *text; false when the buffer holds only part of one.
  // Malformed text (or a byte outside any value) is a corrupt error naming its offset in the stream.
  Result<bool> Next(std::string* text);
  size_t buffered() const { return buf_.size(); }

 private:
  // Scans buf_ from scanned_ on for the end of the value it starts with: the length of the value, 0 when it is not
  // complete yet, npos when it nests deeper than the parser's limit.
  size_t ScanForEnd();

  std::string buf_;
  uint64_t consumed_ = 0;  // stream offset of buf_[0]
  // The scan's state between calls (a value's bytes arrive in pieces).
  size_t scanned_ = 0;
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QMP_JSON_H_
