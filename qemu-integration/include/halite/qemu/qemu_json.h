// A small JSON value, parser and serializer: enough for QMP and for QEMU's VM description (VMDESC).
//
// Objects keep their members in the order they were parsed or set (QMP does not care, humans reading logs do).
// Numbers are kept as int64 when written without fraction or exponent and in range, else as double.
// Thread-compatible: a const Json may be read from many threads.
#ifndef HALITE_QEMU_QEMU_JSON_H_
#define HALITE_QEMU_QEMU_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "halite/status.h"

namespace halite::qemu {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, Json>;

  Json() = default;  // null
  Json(std::nullptr_t) {}  // NOLINT
  Json(bool b) : type_(Type::kBool), bool_(b) {}  // NOLINT
  Json(int v) : Json(static_cast<int64_t>(v)) {}  // NOLINT
  Json(uint32_t v) : Json(static_cast<int64_t>(v)) {}  // NOLINT
  Json(int64_t v) : type_(Type::kNumber), is_int_(true), int_(v), double_(static_cast<double>(v)) {}  // NOLINT
  Json(uint64_t v);  // NOLINT: int when it fits, else double
  Json(double v) : type_(Type::kNumber), double_(v) {}  // NOLINT
  Json(std::string s) : type_(Type::kString), string_(std::move(s)) {}  // NOLINT
  Json(const char* s) : type_(Type::kString), string_(s) {}  // NOLINT
  static Json Array() { Json j; j.type_ = Type::kArray; return j; }
  static Json Object() { Json j; j.type_ = Type::kObject; return j; }
  // Builds an object from {key, value} pairs: Json::Obj({{"execute", "stop"}}).
  static Json Obj(std::initializer_list<Member> members);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_int() const { return type_ == Type::kNumber && is_int_; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Accessors return a neutral value (false, 0, "", empty) for a value of another type.
  bool as_bool() const { return is_bool() && bool_; }
  int64_t as_int() const { return is_int_ ? int_ : static_cast<int64_t>(double_); }
  double as_double() const { return double_; }
  const std::string& as_string() const { return string_; }
  const std::vector<Json>& items() const { return items_; }
  std::vector<Json>& items() { return items_; }
  const std::vector<Member>& members() const { return members_; }

  // Object member lookup: nullptr when absent or when this is not an object.
  const Json* Find(std::string_view key) const;
  // Sets (replacing) a member; turns a null into an object.
  Json& Set(std::string key, Json value);
  // Appends to an array; turns a null into an array.
  Json& Push(Json value);

  // Compact serialization (no newlines: one QMP message per line).
  std::string Serialize() const;
  void SerializeTo(std::string* out) const;

  // Parses exactly one value (surrounding whitespace allowed). Errors name `what` and the byte offset:
  // "qmp: offset 0x12: expected ':' after object key". Depth is limited to 256.
  static Result<Json> Parse(std::string_view text, std::string_view what = "json");

  friend bool operator==(const Json& a, const Json& b);

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  std::vector<Json> items_;
  std::vector<Member> members_;
};

// Splits a byte stream into complete top-level JSON texts (QMP sends one object per line, but a reader must not
// rely on reads ending at line boundaries). Feed bytes, then call Next until it returns false.
class JsonFramer {
 public:
  void Feed(std::string_view bytes) { buf_.append(bytes); }
  // Moves the next complete top-level value's text into *text. A stray byte outside any value is an error.
  Result<bool> Next(std::string* text);
  size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
  size_t scan_ = 0;  // how far the current value has been scanned
  int depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  bool started_ = false;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_JSON_H_
